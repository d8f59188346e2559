"""The torchjob command."""
