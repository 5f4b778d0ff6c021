"""Plain autoregressive decoding: each step feeds the current token and commits the model's next
token. The baseline every method is compared with."""

from .base import Method
from .spec import MethodSpec


class AR(Method):
    pass


SPEC = MethodSpec(name="ar", label="AR", colour="#000000", cls=AR, samples=True)
