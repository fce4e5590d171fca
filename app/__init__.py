"""The composition root and the command line: configuration, `spindle run` and the
other subcommands, doctor, status and logging."""
