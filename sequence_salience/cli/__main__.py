"""`python -m sequence_salience.cli ...`: the `sequence-salience` command."""

from sequence_salience.cli import run

run()
