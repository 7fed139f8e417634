"""Keep the test clusters on 127.0.0.1.

On Linux Ray gives every node the machine's network address and rewrites a loopback address
passed to ``ray.init`` to it. ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes it take the loopback
address everywhere (what it does on macOS and Windows); Ray reads it once, when ``ray`` is first
imported, and the nodes it starts inherit it. A real deployment leaves it unset.
"""

import os

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
