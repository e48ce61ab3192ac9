//! Rust client for UNS, the Unified Notification Service.
//!
//! The messages and the tonic client/server code under [`uns::v1`] are
//! generated from `protos/uns/v1/*.proto` by `scripts/generate.sh`
//! (protoc-gen-prost + protoc-gen-tonic); never edit `src/gen/` by hand.
//! Well-known types (`Timestamp`, `Struct`) come from [`prost_types`].
//!
//! ```no_run
//! use uns_client::NotificationServiceClient;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut client = NotificationServiceClient::connect("http://127.0.0.1:50051").await?;
//! # let _ = &mut client;
//! # Ok(())
//! # }
//! ```

/// Generated code, one module per protobuf package.
pub mod uns {
    /// Protobuf package `uns.v1`.
    pub mod v1 {
        // uns.v1.rs itself includes uns.v1.tonic.rs (the services), through
        // the protoc insertion point that protoc-gen-tonic fills.
        include!("gen/uns.v1.rs");
    }
}

/// Protobuf package `google.rpc`: the `Status` of a failed `BatchSendResult`.
pub mod google {
    /// Protobuf package `google.rpc`.
    pub mod rpc {
        include!("gen/google.rpc.rs");
    }
}

pub use prost_types;
pub use uns::v1::notification_service_client::NotificationServiceClient;
pub use uns::v1::policy_service_client::PolicyServiceClient;
