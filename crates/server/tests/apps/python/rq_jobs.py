"""The job functions of rq_check.py (the worker imports them by name)."""


def add(x, y):
    return x + y


def fail(message):
    raise RuntimeError(message)


def slow_hello(name):
    return f"hello {name}"
