"""The test run's warning filters (setup.cfg, [tool:pytest] filterwarnings): a warning attributed to our code fails
the test; the known third-party deprecations are silent; anything else still shows in the summary."""
from __future__ import annotations

import warnings

import pytest


def warn_from(module: str, category: type[Warning] = UserWarning) -> list[warnings.WarningMessage]:
    """Warns `category` as if `module` had (filters match the module a warning is attributed to), under the test
    run's filters; returns the warnings that were shown."""
    with warnings.catch_warnings(record=True) as shown:  # keeps the filters in force, records what passes them
        warnings.warn_explicit("test warning", category, f"{module.replace('.', '/')}.py", 1, module=module,
                               registry={})
    return shown


@pytest.mark.parametrize("module", ["bench", "bench.planning.plan", "benchmarks.contention_sizes",
                                    "models.measure.common"])
@pytest.mark.parametrize("category", [UserWarning, DeprecationWarning, FutureWarning, RuntimeWarning])
def test_a_warning_from_our_code_is_an_error(module, category):
    with pytest.raises(category, match="test warning"):
        warn_from(module, category)


@pytest.mark.parametrize("module", ["benchy", "modelscope.hub", "marshmallow", "marshmallow.fields",
                                    "azure.ai.ml._schema.core.fields"])
def test_other_modules_do_not_fail_the_test(module):
    shown = warn_from(module, DeprecationWarning)
    # Ours only by a prefix of the name: still shown. The known third-party deprecations: not shown at all.
    assert [w.category for w in shown] == ([] if module.startswith(("marshmallow", "azure")) else [DeprecationWarning])


def test_a_third_party_warning_other_than_a_deprecation_is_still_shown():
    assert [w.category for w in warn_from("marshmallow.fields", UserWarning)] == [UserWarning]
