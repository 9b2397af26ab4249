"""I/O: the only verify modules that touch the network, SSH or subprocesses."""
