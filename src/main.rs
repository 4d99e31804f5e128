fn main() {
    std::process::exit(agentd::cli::main());
}
