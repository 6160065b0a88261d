//! How a bridge endpoint reaches its peers: the zenoh session settings that robot
//! and daemon configs share (`[actor.robot.link]`, `imago robot-serve --listen`), and
//! the declarations every side of the bridge and the fleet makes the same way.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::Receiver;
use serde::{Deserialize, Serialize};
use zenoh::liveliness::LivelinessToken;
use zenoh::pubsub::{Publisher, Subscriber};
use zenoh::qos::CongestionControl;
use zenoh::sample::SampleKind;
use zenoh::{Config, Session, Wait};

/// Whether this process routes for others (peer) or goes through a router (client).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkMode {
    /// Talks directly to other peers (the default; no router needed on one LAN).
    #[default]
    Peer,
    /// Talks only through the routers in `connect` (a `zenohd` per site).
    Client,
}

/// The zenoh session of a bridge endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkConfig {
    /// Peer or client.
    pub mode: LinkMode,
    /// Endpoints to connect to (`tcp/192.168.1.20:7447`).
    pub connect: Vec<String>,
    /// Endpoints to listen on (`tcp/0.0.0.0:7447`); empty: zenoh's default for the
    /// mode.
    pub listen: Vec<String>,
    /// Find peers on the LAN by UDP multicast (zenoh's scouting). On by default; off
    /// when `connect` names the peers (tests, robots on routed networks).
    pub multicast_scouting: Option<bool>,
}

impl LinkConfig {
    /// A link that listens on `listen` and connects to `connect`, without multicast
    /// scouting.
    pub fn explicit(listen: Vec<String>, connect: Vec<String>) -> Self {
        Self {
            mode: LinkMode::Peer,
            connect,
            listen,
            multicast_scouting: Some(false),
        }
    }

    /// Whether multicast scouting is on: as set, else only when no endpoint is named.
    pub fn scouting(&self) -> bool {
        self.multicast_scouting
            .unwrap_or(self.connect.is_empty() && self.listen.is_empty())
    }

    /// Checks the endpoints' form (`PROTOCOL/ADDRESS`, tcp only in this build); a
    /// client needs a router to connect to. The error names the key.
    pub fn validate(&self) -> Result<(), String> {
        for (key, endpoints) in [("connect", &self.connect), ("listen", &self.listen)] {
            for endpoint in endpoints {
                let Some((protocol, address)) = endpoint.split_once('/') else {
                    return Err(format!(
                        "{key}: `{endpoint}` is not an endpoint; write PROTOCOL/ADDRESS, e.g. tcp/127.0.0.1:7447"
                    ));
                };
                if protocol != "tcp" || address.is_empty() {
                    return Err(format!(
                        "{key}: `{endpoint}`: this build speaks tcp only (e.g. tcp/127.0.0.1:7447)"
                    ));
                }
            }
        }
        if self.mode == LinkMode::Client && self.connect.is_empty() {
            return Err("mode = \"client\" needs a router in connect".into());
        }
        Ok(())
    }

    /// Opens the zenoh session; an endpoint that cannot be listened on (a port in
    /// use) is an error naming it.
    pub fn open(&self) -> anyhow::Result<Session> {
        self.validate().map_err(anyhow::Error::msg)?;
        let mut config = Config::default();
        let settings = [
            ("mode", json(&self.mode)),
            ("connect/endpoints", json(&self.connect)),
            ("scouting/multicast/enabled", json(&self.scouting())),
        ];
        for (key, value) in settings {
            config
                .insert_json5(key, &value)
                .map_err(|e| anyhow::anyhow!("zenoh setting {key} = {value}: {e}"))?;
        }
        if !self.listen.is_empty() {
            let value = json(&self.listen);
            config
                .insert_json5("listen/endpoints", &value)
                .map_err(|e| anyhow::anyhow!("zenoh setting listen = {value}: {e}"))?;
        }
        zenoh::open(config).wait().map_err(|e| {
            anyhow::anyhow!(
                "cannot open the zenoh session (listen {:?}, connect {:?}): {e}",
                self.listen,
                self.connect
            )
        })
    }
}

/// A publisher on `key` that never waits on the network (congestion control `Drop`:
/// a message that cannot go now is lost) and sends each message at once (`express`,
/// no batching).
pub fn express_publisher(session: &Session, key: &str) -> anyhow::Result<Publisher<'static>> {
    session
        .declare_publisher(key.to_string())
        .congestion_control(CongestionControl::Drop)
        .express(true)
        .wait()
        .map_err(|e| anyhow::anyhow!("declaring {key}: {e}"))
}

/// A subscriber on `key` whose payloads wait in a queue of `capacity` (more are
/// dropped) for a thread of the caller's.
pub fn payload_queue(
    session: &Session,
    key: &str,
    capacity: usize,
) -> anyhow::Result<(Subscriber<()>, Receiver<Vec<u8>>)> {
    let (sender, payloads) = crossbeam_channel::bounded(capacity);
    let subscriber = session
        .declare_subscriber(key.to_string())
        .callback(move |sample| {
            let _ = sender.try_send(sample.payload().to_bytes().into_owned());
        })
        .wait()
        .map_err(|e| anyhow::anyhow!("subscribing to {key}: {e}"))?;
    Ok((subscriber, payloads))
}

/// The liveliness token at `key`: the peer's sign of life while this side holds it.
pub fn alive_token(session: &Session, key: &str) -> anyhow::Result<LivelinessToken> {
    session
        .liveliness()
        .declare_token(key.to_string())
        .wait()
        .map_err(|e| anyhow::anyhow!("declaring {key}: {e}"))
}

/// Whether the liveliness token at a key is present, as zenoh's threads report it
/// (with history: a peer already up is seen at once).
pub struct PeerAlive {
    alive: Arc<AtomicBool>,
    _subscriber: Subscriber<()>,
}

impl PeerAlive {
    /// Watches the token at `key`.
    pub fn watch(session: &Session, key: &str) -> anyhow::Result<Self> {
        let alive = Arc::new(AtomicBool::new(false));
        let flag = alive.clone();
        let subscriber = session
            .liveliness()
            .declare_subscriber(key.to_string())
            .history(true)
            .callback(move |sample| flag.store(sample.kind() == SampleKind::Put, Ordering::Relaxed))
            .wait()
            .map_err(|e| anyhow::anyhow!("watching {key}: {e}"))?;
        Ok(Self {
            alive,
            _subscriber: subscriber,
        })
    }

    /// Whether the token is present now.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }
}

/// `value` as JSON text (what zenoh's `insert_json5` takes).
fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_checked_and_named() {
        let link = LinkConfig::explicit(vec!["tcp/127.0.0.1:0".into()], vec![]);
        assert!(link.validate().is_ok());
        assert!(!link.scouting());
        let error = LinkConfig::explicit(vec!["127.0.0.1:7447".into()], vec![])
            .validate()
            .unwrap_err();
        assert!(
            error.contains("listen") && error.contains("PROTOCOL/ADDRESS"),
            "{error}"
        );
        let error = LinkConfig::explicit(vec![], vec!["quic/1.2.3.4:7447".into()])
            .validate()
            .unwrap_err();
        assert!(
            error.contains("connect") && error.contains("tcp only"),
            "{error}"
        );
        let client = LinkConfig {
            mode: LinkMode::Client,
            ..LinkConfig::default()
        };
        assert!(client.validate().unwrap_err().contains("router"));
        assert!(LinkConfig::default().scouting());
    }
}
