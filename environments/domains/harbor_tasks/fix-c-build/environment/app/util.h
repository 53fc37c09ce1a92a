int sum(int n, const int *xs);
int max(int n, const int *xs);
