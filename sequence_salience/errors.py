class SalienceError(ValueError):
    """Bad input to sequence_salience; the message names the cause and the fix."""
