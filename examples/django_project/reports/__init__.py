"""An example Django app with periodic tasks."""
