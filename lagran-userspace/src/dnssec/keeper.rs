//! The key keeper: the signed zones' keys as the database holds them, opened
//! with the key file, moved along their rollovers on the leader before each
//! full build, and handed to the table signer as a [`KeySnapshot`].
//!
//! Keys are in the database, sealed with the operator's key file, rather
//! than in a directory of key files: every control process (the leader and
//! the standbys that may lead next) then sees the same key set and the same
//! rollover states without shared storage, and a database copy alone holds
//! no usable key. A directory of an earlier version (`dnssec_key_dir`) is
//! imported once, so the DS its parent holds keeps matching.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use hickory_proto::rr::Name;

use super::key_store::KeyDirectory;
use super::keys::{KeyError, ZoneKey};
use super::rollover::{self, Event, Step, Timing};
use super::sealing::{SealingKey, new_key_id};
use crate::model::{DnssecAlgorithm, Domain, KeyRole, KeyState, Zone, ZoneDnssec};
use crate::store::Store;
use crate::store::dnssec_keys::StoredKey;

/// What the CDS and CDNSKEY RRsets of a zone say.
#[derive(Clone, Debug)]
pub enum ChildKeys {
    /// The DS the parent should hold: these KSKs'.
    Keys(Vec<Arc<ZoneKey>>),
    /// RFC 8078 §4: remove the DS (`CDS 0 0 0 00`, `CDNSKEY 0 3 0 AA==`).
    Delete,
}

/// A zone's keys as a table is signed with them.
#[derive(Clone, Debug)]
pub struct ZoneKeySet {
    pub policy: ZoneDnssec,
    /// The DNSKEY RRset.
    pub served: Vec<Arc<ZoneKey>>,
    /// Signs every RRset but the apex key sets.
    pub zsk: Arc<ZoneKey>,
    /// Sign the DNSKEY, CDS and CDNSKEY RRsets (two during a KSK rollover).
    pub ksks: Vec<Arc<ZoneKey>>,
    pub child: ChildKeys,
}

/// Every zone's keys, and what is coming, at one build.
#[derive(Clone, Debug, Default)]
pub struct KeySnapshot {
    pub zones: BTreeMap<String, ZoneKeySet>,
    /// The stored keys not removed (for status and metrics).
    pub keys: Vec<StoredKey>,
    /// Each zone's next event.
    pub next: BTreeMap<String, Event>,
}

impl KeySnapshot {
    /// One new KSK and one new ZSK of `policy`'s algorithm for `zone`, both
    /// served, the CDS/CDNSKEY naming the KSK: the keys of a table signed
    /// outside the keeper (tests, fixtures), kept in no database.
    pub fn single(zone: &str, policy: ZoneDnssec) -> Result<KeySnapshot, KeyError> {
        let ksk = Arc::new(ZoneKey::generate(KeyRole::Ksk, policy.algorithm)?);
        let zsk = Arc::new(ZoneKey::generate(KeyRole::Zsk, policy.algorithm)?);
        let set = ZoneKeySet {
            policy,
            served: vec![ksk.clone(), zsk.clone()],
            zsk,
            ksks: vec![ksk.clone()],
            child: ChildKeys::Keys(vec![ksk]),
        };
        Ok(KeySnapshot { zones: [(zone.to_string(), set)].into(), ..KeySnapshot::default() })
    }
}

/// The key keeper (see the module documentation).
pub struct KeyKeeper {
    store: Store,
    key_file: PathBuf,
    import: Option<KeyDirectory>,
    delete_wait_secs: u32,
    sealing: Mutex<Option<Arc<SealingKey>>>,
    opened: Mutex<HashMap<String, Arc<ZoneKey>>>,
    last: Mutex<Option<Arc<KeySnapshot>>>,
}

/// The largest TTL a zone's signed RRsets are served with.
pub fn max_ttl(zone: &Zone, domains: &[Domain], default_ttl: u32) -> u32 {
    let names = domains.iter().filter(|d| d.zone == zone.name).map(|d| d.ttl.unwrap_or(default_ttl));
    names.chain([zone.ns_ttl, zone.soa_minimum.min(zone.ns_ttl)]).max().unwrap_or(zone.ns_ttl)
}

/// What the keeper needs of a build's inputs.
pub struct ZonesView<'a> {
    pub zones: &'a [Zone],
    pub domains: &'a [Domain],
    pub default_ttl: u32,
}

impl ZonesView<'_> {
    pub fn timing(&self, zone: &Zone, delete_wait: u32) -> Timing {
        Timing::of(zone.dnssec.as_ref(), zone.ns_ttl, max_ttl(zone, self.domains, self.default_ttl), delete_wait)
    }
}

impl KeyKeeper {
    pub fn new(store: Store, key_file: PathBuf, import: Option<KeyDirectory>, delete_wait_secs: u32) -> Self {
        KeyKeeper {
            store,
            key_file,
            import,
            delete_wait_secs,
            sealing: Mutex::new(None),
            opened: Mutex::new(HashMap::new()),
            last: Mutex::new(None),
        }
    }

    pub fn delete_wait_secs(&self) -> u32 {
        self.delete_wait_secs
    }

    /// The snapshot of the last [`KeyKeeper::prepare`], if one ran.
    pub fn last(&self) -> Option<Arc<KeySnapshot>> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The key file's key: read once; made only while the database has never
    /// held a key (a control process without the file must not seal keys the
    /// others cannot open).
    async fn sealing(&self) -> Result<Arc<SealingKey>, KeyError> {
        if let Some(k) = self.sealing.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(k);
        }
        let key = match SealingKey::read(&self.key_file)? {
            Some(k) => k,
            None => {
                let stored = self.store.any_dnssec_key().await.map_err(|e| KeyError::new("reading DNSSEC keys", e))?;
                if stored {
                    return Err(KeyError::new(
                        format!("the DNSSEC key file {}", self.key_file.display()),
                        "is missing while the database holds sealed keys: copy the key file of the other control \
                         processes here (nothing was changed)",
                    ));
                }
                let k = SealingKey::create(&self.key_file)?;
                tracing::warn!(path = %self.key_file.display(), "DNSSEC key file made: back it up and copy it to every control process");
                k
            }
        };
        let key = Arc::new(key);
        *self.sealing.lock().unwrap_or_else(|e| e.into_inner()) = Some(key.clone());
        Ok(key)
    }

    /// A new key of `role` for `zone`, stored in `state`.
    pub async fn generate(
        &self,
        zone: &str,
        role: KeyRole,
        algorithm: DnssecAlgorithm,
        state: KeyState,
        now_ms: i64,
    ) -> Result<StoredKey, KeyError> {
        let key = ZoneKey::generate(role, algorithm)?;
        let stored = self.store_key(zone, key, state, now_ms).await?;
        tracing::info!(zone, role = role.as_str(), tag = stored.tag, state = state.as_str(), "DNSSEC key made");
        Ok(stored)
    }

    async fn store_key(&self, zone: &str, key: ZoneKey, state: KeyState, now_ms: i64) -> Result<StoredKey, KeyError> {
        let sealing = self.sealing().await?;
        let id = new_key_id()?;
        let apex = Name::from_ascii(format!("{zone}.")).map_err(|e| KeyError::new(format!("zone {zone:?}"), e))?;
        let base = StoredKey {
            sealed: sealing.seal(&id, key.pkcs8())?,
            id,
            zone: zone.to_string(),
            role: key.role,
            algorithm: key.algorithm.number(),
            tag: key.tag(),
            state: KeyState::Generated,
            dnskey: key.dnskey().to_string(),
            ds: key.ds(&apex)?.to_string(),
            created_at_ms: now_ms,
            published_at_ms: None,
            active_at_ms: None,
            retired_at_ms: None,
            withdrawing_at_ms: None,
            removed_at_ms: None,
        };
        let stored = base.moved(state, now_ms);
        self.store.insert_dnssec_key(&stored).await.map_err(|e| KeyError::new("storing a DNSSEC key", e))?;
        self.opened.lock().unwrap_or_else(|e| e.into_inner()).insert(stored.id.clone(), Arc::new(key));
        Ok(stored)
    }

    /// Imports the key directory's keys of the signed zones that have no key
    /// in the database (keys left in the directory for an unsigned zone stay
    /// there: importing them would sign the zone).
    async fn import_directory(
        &self,
        view: &ZonesView<'_>,
        stored: &[StoredKey],
        now_ms: i64,
    ) -> Result<bool, KeyError> {
        let Some(dir) = &self.import else { return Ok(false) };
        let known: BTreeSet<&str> = stored.iter().map(|k| k.zone.as_str()).collect();
        let signed: BTreeSet<&str> =
            view.zones.iter().filter(|z| z.dnssec.is_some()).map(|z| z.name.as_str()).collect();
        let mut any = false;
        for (zone, algorithm) in dir.zones()? {
            if known.contains(zone.as_str()) || !signed.contains(zone.as_str()) {
                continue;
            }
            let Some(pair) = dir.load(&zone, algorithm)? else { continue };
            let (ksk, zsk) = (pair.ksk.tag(), pair.zsk.tag());
            self.store_key(&zone, pair.ksk, KeyState::Active, now_ms).await?;
            self.store_key(&zone, pair.zsk, KeyState::Active, now_ms).await?;
            tracing::info!(zone, ksk, zsk, dir = %dir.path().display(), "DNSSEC keys imported from the key directory");
            any = true;
        }
        Ok(any)
    }

    async fn list(&self) -> Result<Vec<StoredKey>, KeyError> {
        self.store.list_dnssec_keys().await.map_err(|e| KeyError::new("reading DNSSEC keys", e))
    }

    /// Moves the keys along (when `leading`), then opens the ones served.
    /// Nothing is needed, and no key file read, while no zone is signed and
    /// the database holds no key.
    pub async fn prepare(
        &self,
        view: &ZonesView<'_>,
        now_ms: i64,
        leading: bool,
    ) -> Result<Arc<KeySnapshot>, KeyError> {
        let mut keys = self.list().await?;
        let signed = view.zones.iter().any(|z| z.dnssec.is_some());
        if !signed && keys.is_empty() {
            let empty = Arc::new(KeySnapshot::default());
            *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(empty.clone());
            return Ok(empty);
        }
        self.sealing().await?;
        if leading {
            if self.import_directory(view, &keys, now_ms).await? {
                keys = self.list().await?;
            }
            // A pass applies what is due; what that makes due at once (a key
            // made, then published) takes another. Bounded: the rest waits
            // for the next build.
            for _ in 0..3 {
                if !self.apply_due(view, &keys, now_ms).await? {
                    break;
                }
                keys = self.list().await?;
            }
        }
        let snapshot = Arc::new(self.snapshot(view, keys).await?);
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(snapshot.clone());
        Ok(snapshot)
    }

    /// Applies every zone's due events; whether anything changed. The events
    /// of one zone touch different keys (one per role, and the retired ones),
    /// so they are applied together; what they make due next waits for the
    /// next pass.
    async fn apply_due(&self, view: &ZonesView<'_>, keys: &[StoredKey], now_ms: i64) -> Result<bool, KeyError> {
        let mut changed = false;
        for zone in view.zones {
            let of_zone: Vec<StoredKey> = keys.iter().filter(|k| k.zone == zone.name).cloned().collect();
            if zone.dnssec.is_none() && of_zone.is_empty() {
                continue;
            }
            let timing = view.timing(zone, self.delete_wait_secs);
            let algorithm = zone.dnssec.as_ref().map(|p| p.algorithm).unwrap_or_default();
            for event in rollover::due(rollover::events(&of_zone, zone.dnssec.is_some(), &timing), now_ms) {
                tracing::info!(zone = zone.name, event = event.what, "DNSSEC key event");
                let mut moves = Vec::new();
                for step in &event.steps {
                    match step {
                        Step::Generate { role, state } => {
                            self.generate(&zone.name, *role, algorithm, *state, now_ms).await?;
                        }
                        Step::Move { id, to } => {
                            if let Some(k) = of_zone.iter().find(|k| &k.id == id) {
                                moves.push((k.state, k.moved(*to, now_ms)));
                            }
                        }
                    }
                }
                self.store.move_dnssec_keys(&moves).await.map_err(|e| KeyError::new("moving DNSSEC keys", e))?;
                changed = true;
            }
        }
        Ok(changed)
    }

    /// The key opened (cached by row id).
    async fn open(&self, k: &StoredKey) -> Result<Arc<ZoneKey>, KeyError> {
        if let Some(key) = self.opened.lock().unwrap_or_else(|e| e.into_inner()).get(&k.id) {
            return Ok(key.clone());
        }
        let sealing = self.sealing().await?;
        let algorithm = DnssecAlgorithm::parse(&k.algorithm.to_string())
            .ok_or_else(|| KeyError::new(format!("DNSSEC key {}", k.tag), format!("algorithm {}", k.algorithm)))?;
        let key = Arc::new(ZoneKey::from_pkcs8(k.role, algorithm, sealing.open(&k.id, &k.sealed)?)?);
        if key.tag() != k.tag {
            return Err(KeyError::new(format!("DNSSEC key {} of {}", k.tag, k.zone), "opens to another key"));
        }
        self.opened.lock().unwrap_or_else(|e| e.into_inner()).insert(k.id.clone(), key.clone());
        Ok(key)
    }

    async fn snapshot(&self, view: &ZonesView<'_>, keys: Vec<StoredKey>) -> Result<KeySnapshot, KeyError> {
        let mut snapshot = KeySnapshot::default();
        for zone in view.zones {
            let of_zone: Vec<&StoredKey> = keys.iter().filter(|k| k.zone == zone.name).collect();
            if of_zone.is_empty() {
                continue;
            }
            let owned: Vec<StoredKey> = of_zone.iter().map(|k| (*k).clone()).collect();
            let timing = view.timing(zone, self.delete_wait_secs);
            if let Some(next) = rollover::events(&owned, zone.dnssec.is_some(), &timing).into_iter().next() {
                snapshot.next.insert(zone.name.clone(), next);
            }
            if let Some(set) = self.key_set(zone, &of_zone).await? {
                snapshot.zones.insert(zone.name.clone(), set);
            }
        }
        snapshot.keys = keys;
        Ok(snapshot)
    }

    /// The zone's key set, `None` when no key of it signs.
    async fn key_set(&self, zone: &Zone, keys: &[&StoredKey]) -> Result<Option<ZoneKeySet>, KeyError> {
        let withdrawing = keys.iter().any(|k| k.state == KeyState::Withdrawing);
        let signs = |k: &&&StoredKey, role: KeyRole| {
            k.role == role
                && if withdrawing {
                    k.state == KeyState::Withdrawing
                } else {
                    k.state == KeyState::Active || (role == KeyRole::Ksk && k.state == KeyState::Published)
                }
        };
        let Some(zsk) = keys.iter().rev().find(|k| signs(k, KeyRole::Zsk) && k.active_at_ms.is_some()) else {
            return Ok(None);
        };
        let zsk = self.open(zsk).await?;
        let mut ksks = Vec::new();
        for k in keys.iter().filter(|k| signs(k, KeyRole::Ksk)) {
            ksks.push(self.open(k).await?);
        }
        if ksks.is_empty() {
            return Ok(None);
        }
        let mut served = Vec::new();
        for k in keys.iter().filter(|k| k.state.served()) {
            served.push(self.open(k).await?);
        }
        let algorithm = zsk.algorithm;
        let policy = zone.dnssec.clone().unwrap_or(ZoneDnssec { algorithm, ..ZoneDnssec::default() });
        let child = if withdrawing { ChildKeys::Delete } else { ChildKeys::Keys(ksks.clone()) };
        Ok(Some(ZoneKeySet { policy, served, zsk, ksks, child }))
    }
}
