from calc import add, mul
assert add(2, 3) == 5
assert mul(4, 5) == 20
print('ok')
