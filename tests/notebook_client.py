"""A Jupyter kernel client that waits for each shell reply in 1 s looks instead of one look until the cell's limit.

After a cell that draws an ipywidgets `interact` (measured with two workers: from 1 in 100 to 1 in 10 such
cells, with ipykernel 7.3 and 7.4 alike), the reply can sit in the client's shell socket without waking the
asyncio poll that waits for it (pyzmq watches that socket through an edge-triggered descriptor); nbclient
then finds it only when its single poll ends, at the cell timeout (a chapter took 65 s instead of 5). A fresh
poll looks at the socket first, so it finds such a reply at once: the wait costs at most a second. A reply
that never comes still ends in the cell timeout.

Used by ``tests/notebooks/test_standalone.py`` and by ``tests/run_newest.py``, whose throw-away environment imports
this file from the tests folder.
"""

from queue import Empty
from time import monotonic

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from traitlets import Type


class ShellChannel(AsyncZMQSocketChannel):
    async def get_msg(self, timeout=None):
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            look = 1.0 if deadline is None else max(0.0, min(1.0, deadline - monotonic()))
            try:
                return await super().get_msg(timeout=look)
            except Empty:
                if deadline is not None and monotonic() >= deadline:
                    raise


class Client(AsyncKernelClient):
    shell_channel_class = Type(ShellChannel)
