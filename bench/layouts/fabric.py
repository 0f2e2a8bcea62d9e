"""The two tiers a layout's traffic crosses, per GPU: the link inside a node and the share of the node's fabric one
GPU gets between nodes, both from the what-if model's link table (bench/analysis/whatif.py: LINKS, FABRICS, each with
its source). A measured collective sweep would replace these; the planner says which it used."""
from __future__ import annotations

from dataclasses import dataclass, field

from bench.analysis.whatif import FABRICS, LINKS


@dataclass(frozen=True)
class Tier:
    name: str
    alpha_s: float
    beta_Bps: float  # per GPU, one direction
    source: str
    # Measured 2-rank times on this tier, op (allgather, reduce_scatter, allreduce, sendrecv, pipeline_p2p) →
    # ((bytes, seconds), ...) in size order: where an op has them they price it instead of α and β
    # (bench/layouts/sweep_tiers.py).
    measured: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict:
        """name, α, β and source: the planner's JSON (its catalogue tiers have no measured curves)."""
        return {"name": self.name, "alpha_s": self.alpha_s, "beta_Bps": self.beta_Bps, "source": self.source}


@dataclass(frozen=True)
class Fabric:
    gpus_per_node: int
    intra: Tier
    inter: Tier | None  # None: one node, or no such fabric

    def sharing(self, stride: int, degree: int) -> int:
        """How many groups of a dimension (`degree` ranks `stride` apart) send over one node's link at once, where that
        link's tier was measured with one flow (a sweep between two nodes of one rank each): the groups with a member
        on the node. 1 elsewhere: the catalogue's inter-node β is already one GPU's share of its node's fabric."""
        tier = self.tier(stride, degree)
        if degree <= 1 or tier is not self.inter or not tier.measured:
            return 1
        members_per_node = max(1, min(degree, self.gpus_per_node // stride))
        return max(1, self.gpus_per_node // members_per_node)

    def tier(self, stride: int, degree: int) -> Tier:
        """The tier a group of `degree` ranks `stride` apart crosses: inside a node when it fits in one."""
        if degree <= 1 or stride * degree <= self.gpus_per_node or self.inter is None:
            return self.intra
        return self.inter


def fabric_of(sku: str, gpus_per_node: int, fabric: str) -> Fabric:
    """The tiers of a catalogue SKU's nodes over `fabric` (ib | tcp); KeyError/ValueError for what it lacks."""
    links = FABRICS[sku]
    intra = LINKS[links["intra"]]
    key = links.get(fabric)
    if key is None:
        raise ValueError(f"{sku} has no {fabric} fabric (the catalogue's {sku} nodes: "
                         f"{', '.join(k for k in ('ib', 'tcp') if links.get(k))})")
    inter = LINKS[key]
    # The inter-node links are per node (ndr-ib-8: eight NICs, one per GPU): a GPU's share is 1/gpus_per_node.
    per_gpu = inter.beta_Bps / gpus_per_node
    return Fabric(gpus_per_node,
                  Tier(intra.name, intra.alpha_s, intra.beta_Bps, intra.source),
                  Tier(inter.name, inter.alpha_s, per_gpu, f"{inter.source}; per GPU: 1/{gpus_per_node} of the node's"))
