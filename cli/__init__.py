"""The start of every command line of this project (`cli.entry`)."""
