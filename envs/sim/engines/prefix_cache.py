"""The LRU prefix cache over block hashes that every prefilling engine keeps (monolithic and P-D
prefill instances; vLLM's automatic prefix caching, SGLang's RadixAttention at block granularity,
Preble-style prefix reuse; see the ``prefix cache`` paragraph of :mod:`envs.sim.engines.instances`).
"""

from __future__ import annotations

from collections import OrderedDict

from envs.sim.core.protocol import InstanceHost
from envs.sim.core.workflows import Call


class PrefixCache:
    """An LRU prefix cache over block hashes, shared by the engines that prefill (monolithic and
    P-D prefill instances; vLLM's automatic prefix caching, SGLang's RadixAttention at block
    granularity, Preble-style prefix reuse).

    A call's prompt is a sequence of fixed-size token blocks identified by
    ``call.node.prefix_hashes`` (block k's hash covers every token up to the block's end, so
    equal hashes mean equal prefixes). A hit is the run of leading blocks present in the cache;
    prefilling a call inserts (or refreshes) all its blocks and evicts the least recently used
    ones beyond ``prefix_cache_blocks``. The simulation's ``prefix_index`` (hash -> instances
    caching it) is kept up to date so schedulers find hits without scanning every cache.
    """

    sim: InstanceHost
    index: int

    def _init_prefix_cache(self, prefix_cache_blocks: int, block_tokens: int) -> None:
        """:param prefix_cache_blocks: LRU capacity in blocks (0 disables the cache).
        :param block_tokens: tokens per prefix block."""
        if isinstance(prefix_cache_blocks, bool) or prefix_cache_blocks < 0:
            raise ValueError(
                f"prefix_cache_blocks must be an integer >= 0 blocks, got {prefix_cache_blocks!r}"
            )
        self.block_tokens = block_tokens
        self.prefix_cache_blocks = prefix_cache_blocks
        self.prefix_cache: OrderedDict[int, None] = OrderedDict()

    def prefix_hit_tokens(self, call: Call) -> int:
        """Tokens of ``call``'s prompt already cached here (leading blocks only)."""
        hashes = call.node.prefix_hashes
        if not hashes or not self.prefix_cache_blocks:
            return 0
        hit = 0
        for h in hashes:
            if h not in self.prefix_cache:
                break
            hit += 1
        # At least one token is always recomputed to produce logits.
        return min(hit * self.block_tokens, call.input_tokens - 1)

    def _touch_prefix(self, call: Call) -> None:
        """Insert or refresh ``call``'s prompt blocks (most recently used) and evict the least
        recently used blocks beyond the capacity."""
        hashes = call.node.prefix_hashes
        if not hashes or not self.prefix_cache_blocks:
            return
        cache = self.prefix_cache
        index = self.sim.prefix_index
        for h in hashes:
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = None
                index.setdefault(h, set()).add(self.index)
        while len(cache) > self.prefix_cache_blocks:
            h, _ = cache.popitem(last=False)
            holders = index[h]
            holders.discard(self.index)
            if not holders:
                del index[h]
