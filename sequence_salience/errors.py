class SalienceError(ValueError):
    """Bad input to sequence_salience; the message names the cause and the fix."""


class PatternBusy(SalienceError):
    """A user pattern not tried because another pattern's match still runs out its time limit
    (aggregate.match_spans: one matcher at a time); the same request may be sent again in a second."""


class ComputationCancelled(Exception):
    """The caller's `cancel` check said stop; raised between chunks of targets (or IG steps)."""
