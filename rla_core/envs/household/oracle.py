"""The oracle: exact shortest-plan distances over an abstract state, memoised per episode.

Abstract state `(room, at, hold, open_mask, cand_locs, cand_ok, lamp)` keeps only what the goal can
depend on: the candidates (objects of the goal's type) with their place and whether they carry the
goal's flag; `hold` is -1 (nothing), a candidate index, or -2 (some other object). Distractor
positions and irrelevant flags are dropped — no precondition reads them, so the distance is exact.

Distances are computed by exploring the reachable abstract graph under a *pruned* action set that
keeps every shortest plan length (never close; never take a distractor; only open a receptacle that
holds a candidate, is the target, or can take the held distractor; only the goal's treatment; put a
candidate only on the target unless there are spare candidates), then running a unit-weight
Dijkstra backwards from won states: dist(s) = min over plans of their length, ∞ if none.
Progress label: is_progress(a) ⇔ dist(next(s, a)) = dist(s) − 1.
"""
from __future__ import annotations

import heapq
import math

from rla_core.envs.household import catalog
from rla_core.envs.household.world import Action, Layout, State

AbstractState = tuple
INF = math.inf
MAX_STATES = 2_000_000  # a guard: real layouts explore a few thousand states


class Oracle:
    """Exact goal distances for one layout; every explored state's distance is cached."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._cand_index = {o: i for i, o in enumerate(layout.candidates)}
        self._spare = len(layout.candidates) > layout.needed
        self._examine = layout.goal_type == "examine"
        tool = catalog.TREATMENT_RECEPTACLE.get(layout.goal_type)
        self._tool_recs = frozenset(r for r, t in enumerate(layout.rec_types) if t == tool)
        self._dist: dict[AbstractState, float] = {}
        self.explored = 0  # abstract states expanded so far (for benchmarks)

    def abstract(self, st: State) -> AbstractState:
        lay = self.layout
        hold = -1 if st.holding < 0 else self._cand_index.get(st.holding, -2)
        mask = sum(1 << r for r, is_open in enumerate(st.is_open) if is_open and lay.closable[r])
        locs = tuple(st.obj_loc[o] for o in lay.candidates)
        ok = tuple((st.obj_flags[o] & lay.need_bit) == lay.need_bit for o in lay.candidates)
        return (st.room, st.at, hold, mask, locs, ok, st.lamp_on and self._examine)

    def distance(self, st: State) -> float:
        """Length of a shortest plan from `st` (0 when won, ∞ when the goal is unreachable)."""
        key = self.abstract(st)
        if key not in self._dist:
            self._explore(key)
        return self._dist[key]

    def is_progress(self, st: State, action: Action) -> bool:
        """True iff `action` is the first step of some shortest plan: dist(next) = dist(st) − 1."""
        here = self.distance(st)
        if here == 0 or here == INF:
            return False
        nxt = st.copy()
        self.layout.apply(nxt, action)
        return self.distance(nxt) == here - 1

    def plan(self, st: State) -> list[str]:
        """A shortest command list from `st` (first admissible command, in display order, at each tie)."""
        remaining = self.distance(st)
        if remaining == INF:
            raise ValueError("the goal is unreachable from this state")
        st, commands = st.copy(), []
        while remaining > 0:
            for command, action in self.layout.admissible(st).items():
                nxt = st.copy()
                self.layout.apply(nxt, action)
                # Pruned successors of an explored state are cached; a miss cannot be on the plan.
                if self._dist.get(self.abstract(nxt)) == remaining - 1:
                    commands.append(command)
                    st, remaining = nxt, remaining - 1
                    break
            else:
                raise RuntimeError("oracle inconsistency: no successor is one step closer")
        return commands

    # ----- search -------------------------------------------------------------------------------
    def _won(self, s: AbstractState) -> bool:
        room, at, hold, mask, locs, ok, lamp = s
        lay = self.layout
        if self._examine:
            return lamp and at == lay.desk and hold >= 0
        done = sum(1 for loc, good in zip(locs, ok, strict=True) if loc == lay.target and good)
        return done >= lay.needed

    def _explore(self, start: AbstractState) -> None:
        """Expand the pruned reachable graph from `start`, then label it backwards from won/known states."""
        index = {start: 0}
        states, parents, seeds = [start], [[]], []
        i = 0
        while i < len(states):
            s = states[i]
            known = self._dist.get(s)
            if known is not None:
                seeds.append((known, i))
            elif self._won(s):
                seeds.append((0, i))
            else:
                for t in self._successors(s):
                    j = index.get(t)
                    if j is None:
                        j = index[t] = len(states)
                        states.append(t)
                        parents.append([])
                    parents[j].append(i)
                if len(states) > MAX_STATES:
                    raise RuntimeError(f"oracle search exceeded {MAX_STATES} states")
            i += 1
        self.explored += len(states)
        dist = [INF] * len(states)
        heapq.heapify(seeds)
        while seeds:
            d, j = heapq.heappop(seeds)
            if d >= dist[j]:
                continue
            dist[j] = d
            for p in parents[j]:
                if d + 1 < dist[p]:
                    heapq.heappush(seeds, (d + 1, p))
        for s, d in zip(states, dist, strict=True):
            self._dist.setdefault(s, d)

    def _successors(self, s: AbstractState) -> list[AbstractState]:
        room, at, hold, mask, locs, ok, lamp = s
        lay = self.layout
        out = [(room, r, hold, mask, locs, ok, lamp) for r in lay.room_recs[room] if r != at]
        out += [(k, -1, hold, mask, locs, ok, lamp) for k in range(len(lay.rooms)) if k != room]
        if at < 0:
            return out
        accessible = not lay.closable[at] or (mask >> at) & 1
        if not accessible:
            if at == lay.target or at in locs or hold == -2 or (self._spare and hold >= 0):
                out.append((room, at, hold, mask | (1 << at), locs, ok, lamp))
        elif hold == -1:
            for ci, loc in enumerate(locs):
                if loc == at:
                    out.append((room, at, ci, mask, locs[:ci] + (-1,) + locs[ci + 1:], ok, lamp))
        elif hold == -2:
            out.append((room, at, -1, mask, locs, ok, lamp))
        elif at == lay.target or self._spare:
            out.append((room, at, -1, mask, locs[:hold] + (at,) + locs[hold + 1:], ok, lamp))
        if hold >= 0 and not ok[hold] and at in self._tool_recs:
            out.append((room, at, hold, mask, locs, ok[:hold] + (True,) + ok[hold + 1:], lamp))
        if self._examine and at == lay.desk and not lamp:
            out.append((room, at, hold, mask, locs, ok, True))
        return out
