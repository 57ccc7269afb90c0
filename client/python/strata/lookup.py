"""What a lookup and a Score call answer."""

from typing import List, Optional

from ._types import CLookup, CScoreStats


class Lookup:
    """st_lookup_result_t: the longest cached prefix (matched) and the
    longest that ends at a KDA checkpoint (resumable), in blocks and in
    tokens; how many owners were asked and how many were down (their
    segments counted as misses)."""

    def __init__(self, r: CLookup, block_tokens: int) -> None:
        self.matched_blocks: int = r.matched_blocks
        self.resumable_blocks: int = r.resumable_blocks
        self.matched_tokens: int = r.matched_blocks * block_tokens
        self.resumable_tokens: int = r.resumable_blocks * block_tokens
        self.nodes_asked: int = r.nodes_asked
        self.nodes_down: int = r.nodes_down

    def __repr__(self) -> str:
        return ("Lookup(matched_blocks=%d, resumable_blocks=%d, matched_tokens=%d, "
                "resumable_tokens=%d, nodes_asked=%d, nodes_down=%d)" % (
                    self.matched_blocks, self.resumable_blocks, self.matched_tokens,
                    self.resumable_tokens, self.nodes_asked, self.nodes_down))


class ScoreStats:
    """st_score_stats_t: what a Score call did."""

    def __init__(self, s: CScoreStats) -> None:
        self.blocks: int = s.blocks
        self.blocks_scored: int = s.blocks_scored
        self.bytes_sent: int = s.bytes_sent
        self.bytes_received: int = s.bytes_received
        self.nodes: int = s.nodes

    def __repr__(self) -> str:
        return ("ScoreStats(blocks=%d, blocks_scored=%d, bytes_sent=%d, bytes_received=%d, "
                "nodes=%d)" % (self.blocks, self.blocks_scored, self.bytes_sent,
                               self.bytes_received, self.nodes))


class ScoreResult:
    """The global top-k of a Score call: positions (block * block_tokens +
    row) and scores, by score descending (ties by the lower position)."""

    def __init__(self, positions: List[int], scores: List[float],
                 stats: Optional[ScoreStats]) -> None:
        self.positions = positions
        self.scores = scores
        self.stats = stats

    def __len__(self) -> int:
        return len(self.positions)

    def __repr__(self) -> str:
        head = ", ".join("%d:%.4g" % ps for ps in list(zip(self.positions, self.scores))[:4])
        return "ScoreResult(k=%d, top=[%s%s], %r)" % (len(self.positions), head,
                                                     ", ..." if len(self) > 4 else "", self.stats)
