//! The host side of the WIT packages in `wit/`: one `bindgen!` per world, nothing else.
//!
//! `tool` binds `tollgate:tool/tool-provider`. `agent` binds the options factory of both
//! `tollgate:agent` versions the host loads: `v0_1` the two worlds of 0.1.0 (kept, frozen, under
//! `wit/deps/agent@0.1.0/`), `v0_2` the widest world of 0.2.0 (`wit/agent/`), whose interfaces the
//! loader looks up one by one (`GuestIndices`), so one binding serves every 0.2.0 world. All of
//! them reuse the tool package's `log` and `config` imports through `with:`, so one host
//! implementation serves both packages.

pub(crate) mod tool {
    wasmtime::component::bindgen!({
        path: "../../wit/tool",
        world: "tollgate:tool/tool-provider",
        exports: { default: async },
    });
}

pub(crate) mod agent {
    pub(crate) mod v0_1 {
        pub(crate) mod plain {
            wasmtime::component::bindgen!({
                path: "../../wit/deps/agent@0.1.0",
                world: "tollgate:agent/options-factory",
                exports: { default: async },
                with: {
                    "tollgate:tool/log": crate::bindings::tool::tollgate::tool::log,
                    "tollgate:tool/config": crate::bindings::tool::tollgate::tool::config,
                },
            });
        }

        pub(crate) mod with_policy {
            wasmtime::component::bindgen!({
                path: "../../wit/deps/agent@0.1.0",
                world: "tollgate:agent/options-factory-with-cli-policy",
                exports: { default: async },
                with: {
                    "tollgate:tool/log": crate::bindings::tool::tollgate::tool::log,
                    "tollgate:tool/config": crate::bindings::tool::tollgate::tool::config,
                    "tollgate:agent/types": super::plain::tollgate::agent::types,
                },
            });
        }
    }

    pub(crate) mod v0_2 {
        wasmtime::component::bindgen!({
            path: "../../wit/agent",
            world: "tollgate:agent/options-factory-with-cli-policy-and-hooks",
            exports: { default: async },
            with: {
                "tollgate:tool/log": crate::bindings::tool::tollgate::tool::log,
                "tollgate:tool/config": crate::bindings::tool::tollgate::tool::config,
            },
        });
    }
}
