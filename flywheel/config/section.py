"""The base of every config section. A key the section does not define is an error that
names it (`trainer.learnig_rate: Extra inputs are not permitted`), not a setting silently
dropped: a typo in a recipe would otherwise run the defaults without a word."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
