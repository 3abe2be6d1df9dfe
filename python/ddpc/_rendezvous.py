"""The elastic rendezvous behind ddpc-run's ``--nnodes MIN:MAX``, with the
rules of torchrun's c10d rendezvous.

The agents (one ddpc-run per node) meet in a TCPStore at the rendezvous
endpoint, which the agent on that machine hosts (the first one to bind the
port; the rest are its clients), under the job's --rdzv-id. The state of
the rendezvous is one JSON value that every change replaces with
compare_set, so that agents changing it at once never lose each other's
change:

    round         the number of the round, from 0
    complete      whether the round is closed (its workers run)
    participants  [node, address, port] in join order: the node ranks; the
                  first one's address and port are the workers' MASTER_ADDR
                  and MASTER_PORT
    waiting       nodes that came while the round ran, for the next one
    deadline      (wall clock) when an open round with MIN nodes closes
    restarts      worker failures so far (TORCHELASTIC_RESTART_COUNT)
    closed        None, "finished" or why the job was given up

A round closes when MAX nodes joined, or when at least MIN did and
``last_call_timeout`` passed with no new one; an agent waits at most
``join_timeout`` for it. Each agent writes the time to its heartbeat key
every ``keep_alive_interval``; one silent for ``keep_alive_max_attempt``
intervals (or that left, writing "gone") is dead. A running agent opens the
next round when one of its round's nodes is dead, or when a node waits and
the round has fewer than MAX; a failed worker opens it too, counting a
restart."""

import json
import os
import socket
import threading
import time
import uuid
from collections import namedtuple

from ._C import DistError
from ._procs import free_port

CONF_DEFAULTS = {"join_timeout": 600.0, "last_call_timeout": 30.0, "keep_alive_interval": 5.0,
                 "keep_alive_max_attempt": 3.0}
_STATE = "state"
_STORE_TIMEOUT_S = 30.0  # of one store request: the keys read are there already
_EXIT_BARRIER_S = 300.0  # torchrun's wait for the other nodes' workers to finish

Round = namedtuple("Round", "number node_rank nnodes master_addr master_port restarts nodes")


class RendezvousError(RuntimeError):
    """The rendezvous failed; the message says why."""


class RendezvousClosed(Exception):
    """The job ended on another node: ``finished`` where it succeeded."""

    def __init__(self, reason):
        super().__init__(reason)
        self.finished = reason == "finished"


def _is_local(host):
    """Whether ``host`` names this machine: an address of it can be bound."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, _, _, _, addr in infos:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((addr[0], 0))
                return True
            except OSError:
                pass
    return False


def _address_towards(host, port):
    """This machine's address on the route to ``host`` (no packet is sent)."""
    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            return s.getsockname()[0]
    except OSError:
        return socket.getfqdn()


def _initial_state():
    return {"round": 0, "complete": False, "participants": [], "waiting": [], "deadline": None, "restarts": 0,
            "closed": None}


class Rendezvous:
    """This node's agent in the rendezvous ``run_id`` at ``host``:``port``.
    ``conf``: CONF_DEFAULTS's keys (and ``is_host``, True, False or None to
    decide from the host); ``poll``: seconds between looks at the store."""

    def __init__(self, host, port, run_id, min_nodes, max_nodes, conf, poll):
        from .distributed._store import PrefixStore, TCPStore

        self.min_nodes, self.max_nodes, self.poll = min_nodes, max_nodes, poll
        self.join_timeout = conf["join_timeout"]
        self.last_call_timeout = conf["last_call_timeout"]
        self.interval = conf["keep_alive_interval"]
        self.dead_after = conf["keep_alive_interval"] * conf["keep_alive_max_attempt"]
        self.node = f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.address = _address_towards(host, port)
        is_host = conf.get("is_host")
        store = None
        if is_host or (is_host is None and _is_local(host)):
            try:
                store = TCPStore(host, port, is_master=True, timeout=self.join_timeout)
            except DistError:
                if is_host:
                    raise
        self.hosting = store is not None
        if store is None:  # another agent on this machine hosts it, or another machine does
            store = TCPStore(host, port, timeout=self.join_timeout)
        store.set_timeout(_STORE_TIMEOUT_S)
        self.store = PrefixStore(f"ddpc-run/{run_id}", store)
        self._beat()
        self._stop = threading.Event()
        self._beats = self.store.clone()
        self._beater = threading.Thread(target=self._keep_alive, daemon=True)
        self._beater.start()

    # ---- heartbeats ---------------------------------------------------------------

    def _beat(self, store=None, value=None):
        (store or self.store).set(f"hb/{self.node}", value or repr(time.time()))

    def _keep_alive(self):
        while not self._stop.wait(self.interval):
            try:
                self._beat(self._beats)
            except DistError:  # the store is gone: the agent's own requests fail and say so
                return

    def _dead(self, state):
        """The nodes of ``state`` (participants and waiting) that are dead."""
        nodes = [p[0] for p in state["participants"]] + state["waiting"]
        if not nodes:
            return set()
        now = time.time()
        beats = self.store.multi_get([f"hb/{n}" for n in nodes])
        return {n for n, b in zip(nodes, beats) if b == b"gone" or now - float(b) > self.dead_after}

    # ---- the state ----------------------------------------------------------------

    def _load(self):
        if not self.store.check([_STATE]):
            return b"", _initial_state()
        raw = self.store.get(_STATE)
        return raw, json.loads(raw)

    def _update(self, change):
        """Applies ``change(state)``, which edits the state and says whether it
        did, as one compare_set (again on a state changed meanwhile); returns
        the state."""
        while True:
            raw, state = self._load()
            if not change(state):
                return state
            new = json.dumps(state).encode()
            if self.store.compare_set(_STATE, raw, new) == new:
                return state

    @staticmethod
    def _open_next(state, failed=False):
        state.update(round=state["round"] + 1, complete=False, participants=[], deadline=None,
                     restarts=state["restarts"] + failed)
        return True

    @staticmethod
    def _still(rnd, change):
        """``change`` as a change of the state while it is still in ``rnd``
        (and the job goes on); otherwise none."""
        def change_in_round(state):
            if state["round"] != rnd.number or state["closed"]:
                return False
            return change(state) is not False
        return change_in_round

    def _drop_dead(self, state):
        """Removes dead nodes from ``state``; a closed round that lost one makes
        way for the next. Returns whether it changed ``state``."""
        dead = self._dead(state)
        if not dead:
            return False
        lost = [p for p in state["participants"] if p[0] in dead]
        state["waiting"] = [n for n in state["waiting"] if n not in dead]
        if lost and state["complete"]:
            self._open_next(state)
        else:
            state["participants"] = [p for p in state["participants"] if p[0] not in dead]
        return True

    def _join_step(self, state):
        changed = self._drop_dead(state)
        if state["closed"]:
            return changed
        ids = [p[0] for p in state["participants"]]
        if state["complete"]:
            if self.node not in ids and self.node not in state["waiting"]:
                state["waiting"].append(self.node)
                changed = True
            return changed
        if self.node not in ids:
            # A port of this node's for the workers' store, should it get node rank 0.
            state["participants"].append([self.node, self.address, free_port()])
            state["waiting"] = [n for n in state["waiting"] if n != self.node]
            if len(state["participants"]) >= self.min_nodes:
                state["deadline"] = time.time() + self.last_call_timeout
            changed = True
        n = len(state["participants"])
        if n >= self.max_nodes or (n >= self.min_nodes and time.time() >= state["deadline"]):
            state["complete"] = True
            changed = True
        return changed

    def _leave_step(self, state):
        ids = [p[0] for p in state["participants"]]
        if self.node in state["waiting"] or (self.node in ids and not state["complete"]):
            state["waiting"] = [n for n in state["waiting"] if n != self.node]
            state["participants"] = [p for p in state["participants"] if p[0] != self.node]
            return True
        return False

    # ---- what the launcher calls ----------------------------------------------------

    def next_round(self, interrupted):
        """Joins the next round and waits for it to close; returns its Round,
        or None when ``interrupted`` is set. Raises RendezvousError after
        ``join_timeout``, RendezvousClosed when the job ended elsewhere."""
        deadline = time.monotonic() + self.join_timeout
        while True:
            if interrupted.is_set():
                return None
            state = self._update(self._join_step)
            if state["closed"]:
                raise RendezvousClosed(state["closed"])
            nodes = [p[0] for p in state["participants"]]
            if state["complete"] and self.node in nodes:
                first = state["participants"][0]
                return Round(state["round"], nodes.index(self.node), len(nodes), first[1], first[2],
                             state["restarts"], nodes)
            if time.monotonic() > deadline:
                state = self._update(self._leave_step)
                if state["complete"]:
                    raise RendezvousError(
                        f"join_timeout ({self.join_timeout:g} s) passed while round {state['round']} ran with "
                        f"{len(nodes)} of at most {self.max_nodes} nodes without admitting this one")
                raise RendezvousError(
                    f"join_timeout ({self.join_timeout:g} s) passed with {len(nodes)} node(s) joined of the "
                    f"{self.min_nodes} needed (--nnodes {self.min_nodes}:{self.max_nodes})")
            time.sleep(self.poll)

    def changed(self, rnd):
        """Why the workers of ``rnd`` must stop for a new round (a node came or
        went, a worker failed elsewhere, the job ended), or None."""
        _, state = self._load()
        if state["closed"]:
            return "the job ended on another node"
        if state["round"] != rnd.number:
            return "another node opened a new round"
        dead = self._dead(state)
        if dead & set(rnd.nodes):
            self._update(self._still(rnd, self._drop_dead))
            return f"{len(dead & set(rnd.nodes))} node(s) left"
        if len(rnd.nodes) < self.max_nodes and set(state["waiting"]) - dead:
            self._update(self._still(rnd, self._open_next))
            return "a node is waiting to join"
        return None

    def fail(self, rnd, max_restarts):
        """A worker of ``rnd`` failed: opens the next round, counting a restart;
        returns False where --max-restarts was used up (the job is then given
        up on every node)."""
        def change(state):
            if state["restarts"] >= max_restarts:
                state["closed"] = f"node {rnd.node_rank}'s workers failed after {max_restarts} restart(s)"
            else:
                self._open_next(state, failed=True)

        # Where another node's failure or arrival opened the next round already, this one is not counted.
        return not self._update(self._still(rnd, change))["closed"]

    def finish(self, rnd):
        """This node's workers of ``rnd`` succeeded: waits (bounded) for the
        other nodes' to, as this agent may host the store they use; when all
        did, the job is marked finished for nodes still waiting to join."""
        self.store.add(f"done/{rnd.number}", 1)
        deadline = time.monotonic() + _EXIT_BARRIER_S
        try:
            while time.monotonic() < deadline:
                if int(self.store.get(f"done/{rnd.number}")) >= rnd.nnodes:
                    self._update(self._still(rnd, lambda s: s.update(closed="finished")))
                    return
                _, state = self._load()
                if state["round"] != rnd.number or state["closed"] or self._dead(state) & set(rnd.nodes):
                    return
                time.sleep(self.poll)
        except DistError:  # the host's agent saw every node finish and left with its store
            pass

    def leave(self):
        """Stops the heartbeat and tells the others this node is gone."""
        self._stop.set()
        self._beater.join(timeout=self.interval + _STORE_TIMEOUT_S)
        try:
            state = self._update(self._leave_step)
            self._beat(value="gone")
            if self.hosting and state["closed"]:
                self._linger(state)
        except DistError:
            pass

    def _linger(self, state):
        """Keeps the store up (bounded) until the other nodes saw the job end
        and left: without it they would be left retrying a store gone."""
        deadline = time.monotonic() + self.dead_after
        while time.monotonic() < deadline:
            others = {p[0] for p in state["participants"]} | set(state["waiting"])
            if not others - {self.node} - self._dead(state):
                return
            time.sleep(self.poll)
            _, state = self._load()
