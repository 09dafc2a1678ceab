"""World state, transitions, observations and admissible commands of the household game.

A `Layout` is the immutable compiled spec (indices instead of names); a `State` is the small mutable
part (where the agent is, what it holds, which receptacles are open, where each object is and its
clean/hot/cool flags, the lamp). Actions are tuples `(verb, *indices)`; `admissible` maps the
command text of every action valid in a state to its tuple, so `step` is a dict lookup.
"""
from __future__ import annotations

from dataclasses import dataclass

from rla_core.envs.household import catalog
from rla_core.envs.household.spec import HouseholdSpec

Action = tuple  # ("goto_rec", r) | ("goto_room", k) | ("open", r) | ("close", r) | ("take", o, r) | ...
NOTHING = "Nothing happens."
TREAT_VERBS = ("clean", "heat", "cool")  # verbs whose tool receptacle is catalog.TREATMENT_RECEPTACLE


@dataclass
class State:
    room: int
    at: int  # receptacle index, or -1 = the middle of the room
    holding: int  # object index or -1
    is_open: list[bool]  # per receptacle; non-closable ones count as open
    obj_loc: list[int]  # receptacle index per object, -1 while held
    obj_flags: list[int]  # catalog.FLAG_BITS per object
    lamp_on: bool = False

    def copy(self) -> State:
        return State(self.room, self.at, self.holding, self.is_open[:], self.obj_loc[:],
                     self.obj_flags[:], self.lamp_on)


class Layout:
    """The compiled, immutable part of a spec."""

    def __init__(self, spec: HouseholdSpec) -> None:
        self.rooms = [room.name for room in spec.rooms]
        self.rec_names: list[str] = []
        self.rec_room: list[int] = []
        self.room_recs: list[list[int]] = []
        initially_open: list[bool] = []
        for k, room in enumerate(spec.rooms):
            self.room_recs.append([])
            for rec in room.receptacles:
                self.room_recs[k].append(len(self.rec_names))
                self.rec_names.append(rec.name)
                self.rec_room.append(k)
                initially_open.append(not rec.closed)
        self.rec_types = [catalog.split_name(n)[0] for n in self.rec_names]
        self.closable = [catalog.RECEPTACLE_TYPES[t][0] for t in self.rec_types]
        self.prep = [catalog.RECEPTACLE_TYPES[t][1] for t in self.rec_types]
        rec_index = {name: i for i, name in enumerate(self.rec_names)}
        self.obj_names = [obj.name for obj in spec.objects]
        self.obj_types = [catalog.split_name(n)[0] for n in self.obj_names]
        self.obj_ops = [catalog.OBJECT_TYPES[t] for t in self.obj_types]
        self.desk = next((i for i, t in enumerate(self.rec_types) if t == catalog.LAMP_RECEPTACLE), -1)
        self.goal_type = spec.goal.type
        self.goal_object = spec.goal.object
        self.target = rec_index[spec.goal.target] if spec.goal.target else -1
        self.need_bit = catalog.FLAG_BITS.get(catalog.TREATMENT_FLAG.get(self.goal_type, ""), 0)
        self.needed = catalog.objects_needed(self.goal_type)
        self.candidates = [i for i, t in enumerate(self.obj_types) if t == self.goal_object]
        self.step_limit = spec.step_limit
        flags = [sum(bit for flag, bit in catalog.FLAG_BITS.items() if getattr(o, flag)) for o in spec.objects]
        self._initial = State(self.rooms.index(spec.start_room), -1, -1, initially_open,
                              [rec_index[o.location] for o in spec.objects], flags)

    def initial_state(self) -> State:
        return self._initial.copy()

    def goal_text(self) -> str:
        """'Your task is to: put a clean mug in cabinet 1.'"""
        obj, kind = self.goal_object, self.goal_type
        if kind == "examine":
            return f"Your task is to: examine {catalog.article(obj)} under the desklamp."
        where = f"{self.prep[self.target]} {self.rec_names[self.target]}"
        if kind == "put_two":
            return f"Your task is to: put two {catalog.plural(obj)} {where}."
        adjective = catalog.GOAL_ADJECTIVE.get(kind)
        thing = catalog.article(f"{adjective} {obj}" if adjective else obj)
        return f"Your task is to: put {thing} {where}."

    def is_won(self, st: State) -> bool:
        if self.goal_type == "examine":
            return st.lamp_on and st.at == self.desk and st.holding in self.candidates
        done = sum(1 for o in self.candidates
                   if st.obj_loc[o] == self.target and (st.obj_flags[o] & self.need_bit) == self.need_bit)
        return done >= self.needed

    # ----- observations -------------------------------------------------------------------------
    def _visible(self, st: State, r: int) -> list[str]:
        names = [self.obj_names[o] for o, loc in enumerate(st.obj_loc) if loc == r]
        return ([catalog.LAMP_NAME] if r == self.desk else []) + names

    def describe_receptacle(self, st: State, r: int) -> str:
        name = self.rec_names[r]
        if self.closable[r]:
            if not st.is_open[r]:
                return f"The {name} is closed."
            return f"The {name} is open. In it, you see {catalog.join_names(self._visible(st, r))}."
        return f"{self.prep[r].capitalize()} the {name}, you see {catalog.join_names(self._visible(st, r))}."

    def describe_room(self, st: State) -> str:
        recs = catalog.join_names([self.rec_names[r] for r in self.room_recs[st.room]])
        text = f"Looking quickly around you, you see {recs}."
        others = [f"the {n}" for k, n in enumerate(self.rooms) if k != st.room]
        if others:
            exits = others[0] if len(others) == 1 else ", ".join(others[:-1]) + " and " + others[-1]
            text += f" From here you can go to {exits}."
        return text

    def look(self, st: State) -> str:
        room = self.rooms[st.room]
        if st.at < 0:
            return f"You are in the middle of the {room}. " + self.describe_room(st)
        return f"You are in the {room}, at {self.rec_names[st.at]}. " + self.describe_receptacle(st, st.at)

    # ----- admissible commands ------------------------------------------------------------------
    def admissible(self, st: State) -> dict[str, Action]:
        """Command text -> action, in display order: actions sorted, then examine/inventory/look."""
        names, at, held = self.rec_names, st.at, st.holding
        acts: dict[str, Action] = {}
        for r in self.room_recs[st.room]:
            if r != at:
                acts[f"go to {names[r]}"] = ("goto_rec", r)
        for k, room in enumerate(self.rooms):
            if k != st.room:
                acts[f"go to {room}"] = ("goto_room", k)
        if at >= 0:
            self._admissible_here(st, acts)
        # Useful actions first (sorted, so the order is stable); the idle commands last.
        ordered = {cmd: acts[cmd] for cmd in sorted(acts)}
        if held >= 0:
            ordered[f"examine {self.obj_names[held]}"] = ("examine", held)
        ordered["inventory"] = ("inventory",)
        ordered["look"] = ("look",)
        return ordered

    def _admissible_here(self, st: State, acts: dict[str, Action]) -> None:
        at, held, names = st.at, st.holding, self.rec_names
        rec = names[at]
        if self.closable[at]:
            verb = "close" if st.is_open[at] else "open"
            acts[f"{verb} {rec}"] = (verb, at)
        if st.is_open[at]:
            if held < 0:
                for o, loc in enumerate(st.obj_loc):
                    if loc == at:
                        acts[f"take {self.obj_names[o]} from {rec}"] = ("take", o, at)
            else:
                acts[f"put {self.obj_names[held]} {self.prep[at]} {rec}"] = ("put", held, at)
        if held >= 0:
            for verb in TREAT_VERBS:
                flag = catalog.FLAG_BITS[catalog.TREATMENT_FLAG[verb]]
                if (self.rec_types[at] == catalog.TREATMENT_RECEPTACLE[verb] and verb in self.obj_ops[held]
                        and not st.obj_flags[held] & flag):
                    acts[f"{verb} {self.obj_names[held]} with {rec}"] = (verb, held, at)
        if at == self.desk:
            acts[f"use {catalog.LAMP_NAME}"] = ("lamp",)

    # ----- transitions --------------------------------------------------------------------------
    def apply(self, st: State, action: Action) -> str:
        """Mutate `st` by an admissible action; returns the observation."""
        verb = action[0]
        if verb == "goto_rec":
            st.at = r = action[1]
            return f"You arrive at {self.rec_names[r]}. " + self.describe_receptacle(st, r)
        if verb == "goto_room":
            st.room, st.at = action[1], -1
            return f"You arrive at the {self.rooms[st.room]}. " + self.describe_room(st)
        if verb == "open":
            st.is_open[action[1]] = True
            return f"You open the {self.rec_names[action[1]]}. " + self.describe_receptacle(st, action[1])
        if verb == "close":
            st.is_open[action[1]] = False
            return f"You close the {self.rec_names[action[1]]}."
        if verb == "take":
            o, r = action[1], action[2]
            st.holding, st.obj_loc[o] = o, -1
            return f"You pick up the {self.obj_names[o]} from the {self.rec_names[r]}."
        if verb == "put":
            o, r = action[1], action[2]
            st.holding, st.obj_loc[o] = -1, r
            return f"You put the {self.obj_names[o]} {self.prep[r]} the {self.rec_names[r]}."
        if verb in TREAT_VERBS:
            return self._treat(st, verb, action[1], action[2])
        if verb == "lamp":
            st.lamp_on = not st.lamp_on
            return f"You turn {'on' if st.lamp_on else 'off'} the {catalog.LAMP_NAME}."
        if verb == "examine":
            return self._examine(st, action[1])
        if verb == "inventory":
            if st.holding < 0:
                return "You are not carrying anything."
            return f"You are carrying: {catalog.article(self.obj_names[st.holding])}."
        return self.look(st)

    def _treat(self, st: State, verb: str, o: int, r: int) -> str:
        bits = catalog.FLAG_BITS
        flags = st.obj_flags[o]
        if verb == "clean":
            flags |= bits["clean"]
        elif verb == "heat":  # heating undoes cooling and vice versa
            flags = (flags | bits["hot"]) & ~bits["cool"]
        else:
            flags = (flags | bits["cool"]) & ~bits["hot"]
        st.obj_flags[o] = flags
        return f"You {verb} the {self.obj_names[o]} using the {self.rec_names[r]}."

    def _examine(self, st: State, o: int) -> str:
        states = [flag for flag, bit in catalog.FLAG_BITS.items() if st.obj_flags[o] & bit]
        name = self.obj_names[o]
        text = f"This is {catalog.article(' and '.join(states) + ' ' + name)}." if states else \
            f"There's nothing special about {name}."
        if st.lamp_on and st.at == self.desk:
            text = f"You examine the {name} under the {catalog.LAMP_NAME}. " + text
        return text
