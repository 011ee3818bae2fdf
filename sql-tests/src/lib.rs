//! sqllogictest runner and .slt suites for accelsql (the runner arrives with the engine).
