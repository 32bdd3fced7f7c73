"""A Ray Serve application: answers every request with greeting.reply() (a module of the same
working_dir) and the GREETING its runtime_env sets."""

from greeting import reply
from ray import serve


@serve.deployment
class Hello:
    def __call__(self, request: object) -> str:
        return reply()


app = Hello.bind()
