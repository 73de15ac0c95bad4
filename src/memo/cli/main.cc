#include <cstdio>

int main() { std::puts("memo"); return 0; }
