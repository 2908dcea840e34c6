"""What a checkpoint holds and the rules a restored state must meet.

- :mod:`.trainer_state`: a Trainer's state composed, saved and loaded back, and the version check;
- :mod:`.state_rule`: every part loads with ``weights_only=True`` (checked at each save);
- :mod:`.fit_check` and :mod:`.optimizer_state`: a checkpoint fits this run before anything of
  it is loaded;
- :mod:`.parts`: the parts callbacks may keep out of a load;
- :mod:`.foreign`: checkpoints plugtrain did not write (a Hugging Face folder, Model Zoo's names).
"""

from __future__ import annotations

from plugtrain.train.checkpointing.state.parts import PARTS, checkpoint_parts
from plugtrain.train.checkpointing.state.state_rule import (
    RULE,
    plain_problems,
    round_trip_problems,
    verify_first_checkpoint,
    weights_only_problem,
)
from plugtrain.train.checkpointing.state.trainer_state import (
    StateOwner,
    TrainerState,
    check_version,
)

__all__ = [
    "PARTS",
    "RULE",
    "StateOwner",
    "TrainerState",
    "check_version",
    "checkpoint_parts",
    "plain_problems",
    "round_trip_problems",
    "verify_first_checkpoint",
    "weights_only_problem",
]
