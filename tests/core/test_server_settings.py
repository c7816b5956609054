"""The window's server settings: remembered in the preferences, a bad stored value never
stops the window, the host follows "serve on the local network"."""

import ipaddress

from app.core.preferences import Preferences
from app.core.server_settings import (
    DEFAULT_PORT, SERVER_KEY, ServerSettings, lan_address, load_server_settings, save_server_settings,
)


def test_settings_survive_a_new_preferences_object():
    assert load_server_settings() == ServerSettings()  # nothing stored: the defaults
    chosen = ServerSettings(enabled=True, port=9123, network=True, parallel=4, idle_unload_minutes=0,
                            ollama=True, ollama_port=11500)
    save_server_settings(chosen)
    assert load_server_settings() == chosen
    assert Preferences().get(SERVER_KEY)["port"] == 9123


def test_host_is_loopback_unless_serving_the_network():
    assert ServerSettings().host == "127.0.0.1"
    assert ServerSettings(network=True).host == "0.0.0.0"


def test_bad_stored_values_fall_back_to_the_defaults():
    Preferences().set(SERVER_KEY, {"enabled": "yes", "port": 80, "network": 1, "parallel": -3,
                                   "idle_unload_minutes": -1, "unknown": 5, "ollama": "on",
                                   "ollama_port": 70000})
    assert load_server_settings() == ServerSettings()
    assert not ServerSettings().ollama and ServerSettings().ollama_port == 11434  # off by default
    Preferences().set(SERVER_KEY, ["not", "a", "dict"])
    assert load_server_settings().port == DEFAULT_PORT
    Preferences().set(SERVER_KEY, {"port": True})  # a bool is not a port number
    assert load_server_settings().port == DEFAULT_PORT


def test_lan_address_is_an_address_other_computers_can_use_or_none():
    address = lan_address()
    if address is not None:
        parsed = ipaddress.ip_address(address)
        assert not parsed.is_loopback and not parsed.is_unspecified
