"""The torture harness: random, seeded histories of user operations against a real multiproc system."""
