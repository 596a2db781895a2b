class SalienceError(ValueError):
    """Bad input to sequence_salience; the message names the cause and the fix."""


class ComputationCancelled(Exception):
    """The caller's `cancel` check said stop; raised between chunks of targets (or IG steps)."""
