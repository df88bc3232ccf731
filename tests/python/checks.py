"""checks.py - the PASS/FAIL lines the Python checkers print for their
shell tests (binding_checks.py, state_checks.py): the shell side counts
them against the checker's plan, so a checker that stops early fails."""

# The name of every check made so far; len(results) is the count.
results = []


def check(name, cond, why=""):
    """One check: PASS when cond is true, else FAIL with why."""
    results.append(name)
    print(f"PASS {name}" if cond else f"FAIL {name}: {why}", flush=True)
    return cond


def raises(name, fn, exc, *needles):
    """fn() must raise exc with every needle in its message."""
    try:
        fn()
    except exc as e:
        text = str(e)
        missing = [n for n in needles if n not in text]
        return check(name, not missing, f"message lacks {missing}: {text}")
    except Exception as e:  # noqa: BLE001
        return check(name, False, f"raised {type(e).__name__}: {e}, wanted {exc.__name__}")
    return check(name, False, f"no exception, wanted {exc.__name__}")
