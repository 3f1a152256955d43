"""Ray clusters for pyggml.dist: connect to one, or start a local one on the loopback.

A local cluster has one raylet per "node" (ray.cluster_utils.Cluster), all on this machine: stages
on different raylets pass activations through Ray's object manager as between hosts. It binds
LOOPBACK, a loopback address Ray takes as given: Ray rewrites 127.0.0.1 itself to the host's
outward address (services.resolve_ip_for_localhost), and nothing here should listen or connect
beyond the loopback.
"""
from __future__ import annotations

import os

from .errors import ConfigError, RayMissingError

LOOPBACK = "127.0.0.2"
MIN_OBJECT_STORE = 80 * 2**20


def import_ray():
    """ray, or RayMissingError saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise RayMissingError(f"pyggml.dist needs Ray: pip install 'pyggml[ray]' (or pip install ray): {e}") from None
    return ray


def _job_config(ray):
    # workers import pyggml from where the driver found it (a source checkout is not installed)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return ray.job_config.JobConfig(code_search_path=[root])


class LocalCluster:
    """n_nodes raylets on LOOPBACK, each declaring num_cpus CPUs and num_gpus GPUs, and this
    process connected as the driver. shutdown() (or leaving a `with`) stops them all."""

    def __init__(self, n_nodes=2, num_cpus=1, num_gpus=0, object_store_memory=128 * 2**20):
        ray = import_ray()
        from ray.cluster_utils import Cluster
        if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) or n_nodes < 1:
            raise ConfigError(f"n_nodes must be a positive int, got {n_nodes!r}")
        if ray.is_initialized():
            raise ConfigError("this process is already connected to a Ray cluster (ray.shutdown() first)")
        node = dict(node_ip_address=LOOPBACK, num_cpus=num_cpus, num_gpus=num_gpus,
                    object_store_memory=max(int(object_store_memory), MIN_OBJECT_STORE))
        self.cluster = Cluster(initialize_head=True, head_node_args=dict(node, include_dashboard=False))
        try:
            for _ in range(n_nodes - 1):
                self.cluster.add_node(**node)
            self.cluster.wait_for_nodes()
            ray.init(address=self.cluster.address, _node_ip_address=LOOPBACK, job_config=_job_config(ray),
                     log_to_driver=False)
        except BaseException:
            self.cluster.shutdown()
            raise
        self.address = self.cluster.address
        self.n_nodes = n_nodes

    def shutdown(self):
        import ray
        if ray.is_initialized():
            ray.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()


def connect(address, n_nodes=2, **local_kw):
    """Connect this process to the Ray cluster at `address` ("auto", "HOST:PORT", "ray://..."), or
    start a LocalCluster of n_nodes raylets for "local". Returns the LocalCluster to shut down, or
    None (a cluster someone else runs; ray.shutdown() disconnects)."""
    ray = import_ray()
    if address == "local":
        return LocalCluster(n_nodes, **local_kw)
    if not ray.is_initialized():
        ray.init(address=address, job_config=_job_config(ray), log_to_driver=False)
    return None
