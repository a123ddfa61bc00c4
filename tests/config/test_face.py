"""The face of evalbench.config: its __all__ names what other packages and tests import from it."""

from __future__ import annotations

import evalbench.config as config


def test_exported_members() -> None:
    assert sorted(config.__all__) == sorted(set(config.__all__))
    for name in config.__all__:
        assert getattr(config, name) is not None, name
    # what the rest of evalbench and the tests import from the package itself
    used = {"load_run_config", "RunConfig", "DatabaseConfig", "LlmVUserConfig", "RulesVUserConfig", "SimulatedAgentConfig",
            "AgentConfig", "VUserConfig"}
    assert used <= set(config.__all__)
    public = {name for name in vars(config) if not name.startswith("_") and not isinstance(getattr(config, name), type(config))}
    assert public == set(config.__all__)
