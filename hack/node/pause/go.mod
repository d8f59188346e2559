module torchjob.local/pause

go 1.26
