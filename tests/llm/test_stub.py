"""The stub server as a command."""


def test_a_busy_port_is_one_error_line():
    import socket
    import subprocess
    import sys

    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "utu.llm.stub", "--port", str(port)], capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}") and result.stderr.count("\n") == 1
