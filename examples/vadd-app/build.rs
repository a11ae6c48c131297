fn main() {
    rocmc::Build::new()
        .kernel("../vadd.toml")
        .kernel("../saxpy.toml")
        .mcpu("gfx90a")
        .mcpu("gfx1100")
        .compile();
}
