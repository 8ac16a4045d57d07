"""TensorFlow's error classes for hvdlite's errors, as Horovod's TensorFlow ops raise them: a collective that failed
across ranks (the ranks disagree on a shape, a dtype or a root; a peer stalled or is gone) is a
``tf.errors.FailedPreconditionError``, a bad argument on this rank a ``tf.errors.InvalidArgumentError``. Each class
raised is both hvdlite's (HvdliteError, ValueError, TypeError) and TensorFlow's, so code catching either works.

Eagerly the error is raised as such (``tensorflow_errors``). In a graph (``tf.function``, a TF1 session) a
collective runs inside ``tf.numpy_function``, which turns a Python exception into a TensorFlow error by the
exception's built-in class only (ValueError and TypeError: InvalidArgument; anything else: Unknown, whatever
OpError it is). So there the collective's op returns a status and the message instead of raising, and a
``tf.py_function`` after it (``raise_on_failure``) raises: a ValueError for InvalidArgument; for FailedPrecondition
it returns an object whose type is named by the message, which TensorFlow's py_function refuses with exactly that
class ("Expected EagerTensor, found PyObject of type: <message>"): the one way a Python callback raises
FailedPrecondition with a message of its own. It leans on how py_function hands results over (a test checks the
class and the message in tf.function and in a TF1 session, so a TensorFlow that changes it is noticed).
"""
import contextlib

import numpy as np
import tensorflow as tf

from hvdlite.errors import HvdliteError

OK, FAILED, INVALID = 0, 1, 2  # the status a collective's graph op returns


class CollectiveFailedError(HvdliteError, tf.errors.FailedPreconditionError):
    """A collective failed on every rank of its process set (hvdlite's HvdliteError, TensorFlow's
    FailedPreconditionError)."""

    def __init__(self, message):
        tf.errors.FailedPreconditionError.__init__(self, None, None, message)


class InvalidCollectiveArgumentError(ValueError, tf.errors.InvalidArgumentError):
    """This rank's arguments were refused before anything was sent (a ValueError, and TensorFlow's
    InvalidArgumentError)."""

    def __init__(self, message):
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)


class InvalidCollectiveTypeError(TypeError, tf.errors.InvalidArgumentError):
    """As InvalidCollectiveArgumentError, for a TypeError (a dtype the core does not carry)."""

    def __init__(self, message):
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)


@contextlib.contextmanager
def tensorflow_errors():
    """Raises hvdlite's errors from the block as the classes above."""
    try:
        yield
    except tf.errors.OpError:
        raise
    except HvdliteError as error:
        raise CollectiveFailedError(str(error)) from error
    except TypeError as error:
        raise InvalidCollectiveTypeError(str(error)) from error
    except ValueError as error:
        raise InvalidCollectiveArgumentError(str(error)) from error


def status_of(body, out_dtypes, out_shapes):
    """``body`` for a graph op: its outputs, then the status (int8) and message (bytes); on failure, empty
    placeholders of the declared dtypes in place of the outputs (the check after the op raises before anything reads
    them)."""
    def run(*arrays):
        try:
            return list(body(*arrays)) + [np.int8(OK), np.array(b"")]
        except HvdliteError as error:
            status, message = FAILED, str(error)
        except (ValueError, TypeError) as error:
            status, message = INVALID, str(error)
        placeholders = [np.zeros([d if d is not None else 0 for d in tf.TensorShape(shape).as_list()]
                                 if tf.TensorShape(shape).rank is not None else [0], dtype.as_numpy_dtype)
                        for dtype, shape in zip(out_dtypes, out_shapes)]
        return placeholders + [np.int8(status), np.array(message.encode())]
    return run


def _raise_on_failure(status, message):
    status = int(status.numpy())
    if status == OK:
        return [tf.constant(0, tf.int8)]
    text = message.numpy().decode("utf-8", "replace")
    if status == INVALID:
        raise ValueError(text)  # TensorFlow: InvalidArgumentError
    return [_failure(text)]


def _failure(message):
    """What py_function's Python side passes on as a tensor (``__tf_tensor__`` returning itself, on the op's device
    already) and its C++ side then refuses with FailedPreconditionError naming the object's type: the message."""
    return type(message, (), {"__tf_tensor__": lambda self, dtype=None, name=None: self,
                              "backing_device": property(lambda self: None), "_copy": lambda self: self})()


def raise_on_failure(status, message, name):
    """An op that raises the collective's error (see the module's notes) and otherwise returns an int8 token; the
    py_function runs only on a failure (a py_function per collective would cost more than a small collective)."""
    def check():
        token, = tf.py_function(_raise_on_failure, [status, message], [tf.int8], name=name + "_check")
        return token
    return tf.cond(tf.equal(status, OK), lambda: tf.constant(0, tf.int8), check, name=name + "_status")
