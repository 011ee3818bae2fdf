//! Runnable programs a new accelsql user starts from (they arrive with the engine).
