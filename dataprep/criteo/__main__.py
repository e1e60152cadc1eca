"""`python -m dataprep.criteo`: the converter's command line (`dataprep.criteo.command`)."""

from dataprep.criteo import command

if __name__ == "__main__":
    command.run()
