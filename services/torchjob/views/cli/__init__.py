"""What the CLI makes of objects and flags, pure: the text the cluster commands print (tables,
description), the job recipe `torchjob submit` reads from its flags (submission) and the local
process a replica's pod becomes for `torchjob run` (local). No I/O (the contract "Views do no
I/O"); the CLI's commands around them do the reading, writing and waiting."""
