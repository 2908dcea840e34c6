"""Enables plugtrain's pytest plugin (fixtures: installed_registry, make_registry ...).

The package's own conftest, so its tests run the same from its folder, from a checkout of
plugtrain or from a copy of the package anywhere.
"""

pytest_plugins = ["plugtrain.testing"]
