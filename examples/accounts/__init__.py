"""The accounts example: persistent account entities fed with at-least-once deposits."""
