"""What the core's worker scripts share to check an error: its type, and the words its message must hold."""


def expect_error(error_type, fragments, function, *args, **kwargs):
    """Calls function(*args, **kwargs), which must raise error_type with every fragment in its message;
    returns the message."""
    try:
        function(*args, **kwargs)
    except error_type as e:
        message = str(e)
        for fragment in fragments:
            assert fragment in message, f"{fragment!r} not in {message!r}"
        return message
    raise AssertionError(f"expected {error_type.__name__} with {fragments}")
