// The host imports as componentize-qjs (QuickJS) exposes them: one object per interface.
import log from 'tollgate:tool/log@0.1.0';
import config from 'tollgate:tool/config@0.1.0';

export const emit = (level, message) => log.emit(level, message);
export const get = (key) => config.get(key);
