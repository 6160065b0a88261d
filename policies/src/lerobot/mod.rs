//! What LeRobot's policies share around their networks: the features a policy reads
//! and writes as its `config.json` declares them ([`features`]), and the dataset
//! statistics its processors scale them by ([`normalise`]), and one tick's
//! observation ([`observation`]). LeRobot 0.4.4's names and
//! formats; the files themselves are read by `imago-runtime`.

pub mod features;
pub mod normalise;
pub mod observation;

pub use features::{FeatureType, NormMode, NormalisationMapping, PolicyFeature, PolicyFeatures};
pub use normalise::{FeatureNormaliser, PolicyProcessors, Stat};
pub use observation::TickObservation;
