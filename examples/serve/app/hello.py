"""A Ray Serve application: answers every request with the GREETING its runtime_env sets."""

import os

from ray import serve


@serve.deployment
class Hello:
    def __call__(self, request: object) -> str:
        return os.environ["GREETING"]


app = Hello.bind()
