//! [`stored_names!`]: an enum of a closed set of names the store keeps as text (event kinds, step
//! kinds, session statuses, …), declared once with each variant's stored name.

/// Declares a `Copy` enum whose variants are stored as the given names: serde (de)serializes each
/// as its name, `as_str` gives it, `ALL` lists every variant in declaration order, `parse` reads
/// one back, and `Display` prints it.
macro_rules! stored_names {
    (
        $(#[doc = $doc:literal])*
        pub enum $name:ident {
            $($(#[doc = $vdoc:literal])* $variant:ident = $text:literal,)*
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[doc = $vdoc])* #[serde(rename = $text)] $variant,)*
        }

        impl $name {
            /// Every one, in declaration order.
            pub const ALL: &[$name] = &[$($name::$variant,)*];

            /// The stored name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The one stored as `name`, if there is one.
            pub fn parse(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == name)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
