"""The housekeeper service."""
