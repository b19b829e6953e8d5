//! The host side of the WIT packages in `wit/`: one `bindgen!` per world, nothing else.
//!
//! `tool` binds `tollgate:tool/tool-provider`; `agent` binds the two options-factory worlds and
//! reuses the tool package's `log` and `config` imports through `with:`, so one host
//! implementation serves both.

pub(crate) mod tool {
    wasmtime::component::bindgen!({
        path: "../../wit/tool",
        world: "tollgate:tool/tool-provider",
        exports: { default: async },
    });
}

pub(crate) mod agent {
    pub(crate) mod plain {
        wasmtime::component::bindgen!({
            path: "../../wit/agent",
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
            path: "../../wit/agent",
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
