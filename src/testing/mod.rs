pub mod oracle; pub mod random;
