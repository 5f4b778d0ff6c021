"""Test-wide settings."""


def pytest_configure(config):
    # .streamlit/config.toml hides exception details from visitors (client.showErrorDetails); the
    # AppTests run in this process and should say what went wrong.
    try:
        from streamlit import config as st_config
    except ImportError:
        return
    st_config.set_option("client.showErrorDetails", "full")
