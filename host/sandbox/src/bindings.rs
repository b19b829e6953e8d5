//! The host side of the WIT packages in `wit/`: one `bindgen!` per world, nothing else.
//!
//! `tool` binds `tollgate:tool/tool-provider`. `agent` binds the options factory of every
//! `tollgate:agent` version the host loads: `v0_1` the two worlds of 0.1.0 (kept, frozen, under
//! `wit/deps/agent@0.1.0/`), `v0_2` the widest world of 0.2.0 (frozen, `wit/deps/agent@0.2.0/`),
//! `v0_3` a world of 0.3.0 (`wit/agent/`) that exports every interface. The loader looks the
//! interfaces of 0.2.0 and 0.3.0 up one by one (`GuestIndices`), so one binding serves every
//! combination of their exports. All of them reuse the tool package's `log` and `config` imports
//! through `with:`, so one host implementation serves both packages.

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
            path: "../../wit/deps/agent@0.2.0",
            world: "tollgate:agent/options-factory-with-cli-policy-and-hooks",
            exports: { default: async },
            with: {
                "tollgate:tool/log": crate::bindings::tool::tollgate::tool::log,
                "tollgate:tool/config": crate::bindings::tool::tollgate::tool::config,
            },
        });
    }

    pub(crate) mod v0_3 {
        wasmtime::component::bindgen!({
            path: "../../wit/agent",
            inline: "
                package tollgate:host;

                world every-export {
                    include tollgate:agent/options-factory-with-cli-policy-and-hooks@0.3.0;
                    export tollgate:agent/review@0.3.0;
                }
            ",
            world: "tollgate:host/every-export",
            exports: { default: async },
            with: {
                "tollgate:tool/log": crate::bindings::tool::tollgate::tool::log,
                "tollgate:tool/config": crate::bindings::tool::tollgate::tool::config,
            },
        });
    }
}
