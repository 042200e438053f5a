"""spark_bridge package."""
