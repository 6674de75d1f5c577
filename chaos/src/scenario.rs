//! Scripted simulations: a cluster of real nodes in turmoil whose faults a test places at exact
//! moments (a message held between two nodes, a leader crashed right after an entry reached one
//! follower), for properties that a random fault schedule reaches only by chance.
//!
//! The same nodes, network, disk and settings as a seed's run (`run::add_nodes`,
//! `run::simulation`); the test drives time with [`Scenario::run_until`] and talks to the
//! cluster through client hosts it adds with [`Scenario::call`].

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use chainstore_node::Node;
use openraft::ServerState;
use raft_store::MemEngine;

use crate::run::{add_nodes, begin, leader_of_slots, name, simulation, Slot};

/// A cluster under a test's control.
pub struct Scenario<'a> {
    pub sim: turmoil::Sim<'a>,
    pub ids: Vec<u64>,
    pub engines: BTreeMap<u64, MemEngine>,
    slots: BTreeMap<u64, Slot>,
    calls: u64,
    _turn: MutexGuard<'static, ()>,
}

/// What a call from a client host returned, once it has.
pub type Answer<T> = Rc<RefCell<Option<T>>>;

impl<'a> Scenario<'a> {
    /// Voters `n1..=nodes`, initialized through `n1`, run until one of them leads and has
    /// applied an entry of its term.
    pub fn start(seed: u64, nodes: u64) -> Result<Self, String> {
        let turn = begin(seed);
        let mut sim = simulation(seed, Duration::from_secs(600));
        let ids: Vec<u64> = (1..=nodes).collect();
        let (engines, slots) = add_nodes(&mut sim, &ids);
        let mut scenario = Scenario {
            sim,
            ids,
            engines,
            slots,
            calls: 0,
            _turn: turn,
        };
        let members: BTreeMap<String, String> = scenario
            .ids
            .iter()
            .map(|id| {
                (
                    id.to_string(),
                    format!("{}:{}", name(*id), crate::net::NODE_PORT),
                )
            })
            .collect();
        let body = serde_json::json!({ "nodes": members });
        let init =
            scenario.call(async move { crate::actors::post(1, "/v1/cluster/init", &body).await });
        scenario.run_until(
            "the cluster is initialized",
            Duration::from_secs(10),
            |_| matches!(init.borrow().as_ref(), Some(Ok((200, _)))),
        )?;
        scenario.run_until("a leader serves", Duration::from_secs(10), |s| {
            s.ready_leader().is_some()
        })?;
        Ok(scenario)
    }

    /// The running node `id`, if it is up.
    pub fn node(&self, id: u64) -> Option<Arc<Node>> {
        self.slots.get(&id)?.borrow().clone()
    }

    /// The node that leads and has applied an entry of its own term (ready to evaluate writes).
    pub fn ready_leader(&self) -> Option<u64> {
        let id = leader_of_slots(&self.slots)?;
        let m = self.node(id)?.raft_metrics();
        let term_applied = m.last_applied.map(|l| l.leader_id.term) == Some(m.current_term);
        (m.state == ServerState::Leader && term_applied).then_some(id)
    }

    /// Whether node `id` is up and in the leader state (ready or not).
    pub fn is_leader(&self, id: u64) -> bool {
        self.node(id)
            .is_some_and(|n| n.raft_metrics().state == ServerState::Leader)
    }

    /// Steps the simulation until `done` holds, or fails after `within` of simulated time.
    pub fn run_until(
        &mut self,
        what: &str,
        within: Duration,
        mut done: impl FnMut(&Self) -> bool,
    ) -> Result<(), String> {
        let deadline = self.sim.elapsed() + within;
        loop {
            if done(self) {
                return Ok(());
            }
            if self.sim.elapsed() >= deadline {
                return Err(format!(
                    "{what}: not within {within:?} (at {:?})",
                    self.sim.elapsed()
                ));
            }
            self.sim.step().map_err(|e| format!("{what}: {e}"))?;
        }
    }

    /// Runs `call` on a new client host; its result appears in the answer once it returns.
    pub fn call<T, Fut>(&mut self, call: Fut) -> Answer<T>
    where
        T: 'static,
        Fut: std::future::Future<Output = T> + 'static,
    {
        self.calls += 1;
        let answer: Answer<T> = Rc::new(RefCell::new(None));
        let slot = Rc::clone(&answer);
        self.sim.client(format!("call{}", self.calls), async move {
            let result = call.await;
            *slot.borrow_mut() = Some(result);
            Ok(())
        });
        answer
    }

    /// Runs `call` on a new client host and steps until it returns (at most `within`).
    pub fn call_and_wait<T, Fut>(
        &mut self,
        what: &str,
        within: Duration,
        call: Fut,
    ) -> Result<T, String>
    where
        T: 'static,
        Fut: std::future::Future<Output = T> + 'static,
    {
        let answer = self.call(call);
        self.run_until(what, within, |_| answer.borrow().is_some())?;
        let result = answer.borrow_mut().take();
        result.ok_or_else(|| format!("{what}: no answer"))
    }

    /// Crashes node `id`: the host stops and its disk loses what was not synced.
    pub fn crash(&mut self, id: u64) {
        self.sim.crash(name(id));
        *self.slots[&id].borrow_mut() = None;
        self.engines[&id].crash();
    }

    /// Cuts node `id` off from every other node, both ways (clients still reach it).
    pub fn isolate(&mut self, id: u64) {
        for other in self.ids.iter().filter(|o| **o != id) {
            self.sim.partition(name(id), name(*other));
        }
    }
}
