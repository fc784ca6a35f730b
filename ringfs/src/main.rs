fn main() {
    eprintln!("ringfs: not yet built");
    std::process::exit(1);
}
