"""Kernels reached over ipc sockets in a folder of their own, never over TCP.

jupyter_client picks a kernel's TCP ports by binding port 0 and closing the socket, and the kernel
binds them a second later. In between, any other process may take them. gloo ranks open and close
connections on ephemeral ports all the time, so beside them a kernel can die before it starts
("Address already in use": CI lost a notebook's mutation run to it). An ipc socket is a file in a
folder that only this kernel's manager writes to: nothing else can take it.
"""
from __future__ import annotations

import os
import shutil
import tempfile

from jupyter_client.manager import AsyncKernelManager, KernelManager


class OwnSockets:
    """Mixed into a jupyter_client kernel manager: its kernel's sockets and connection file live in
    `socket_folder`, or, if none is given, in a fresh private folder removed at shutdown."""

    def __init__(self, socket_folder: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self._made_folder = socket_folder is None
        self.socket_folder = socket_folder or tempfile.mkdtemp(prefix="kernel-sockets-")
        self.transport = "ipc"
        self.ip = os.path.join(self.socket_folder, "kernel")
        self.connection_file = os.path.join(self.socket_folder, "kernel.json")

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if self._made_folder and not restart:
            shutil.rmtree(self.socket_folder, ignore_errors=True)


class IpcKernelManager(OwnSockets, KernelManager):
    """jupyter_client's KernelManager over ipc (see the module docstring)."""


class AsyncIpcKernelManager(OwnSockets, AsyncKernelManager):
    """jupyter_client's AsyncKernelManager over ipc (see the module docstring)."""
