"""The autoscaler that runs on the head node."""
