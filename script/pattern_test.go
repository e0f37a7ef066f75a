package script

// Lua 5.1's pattern matching (pattern.go) against Lua 5.1 itself: every want below is the reply
// of a real redis-server 7.0.15 (Lua 5.1.5) to the same EVAL. They run with the compatibility
// cases (TestCompat, and TestCompatRedis against a live server).

func init() { compatCases = append(compatCases, patternCases...) }

// patternPrelude defines S(...): its arguments as tostring shows them, joined by commas, so that
// one bulk reply shows every value a call returned (nils included).
const patternPrelude = `local function S(...) local t = {} for i = 1, select('#', ...) do t[i] = tostring((select(i, ...))) end return table.concat(t, ',') end `

var patternCases = []compatCase{
	{name: "pattern find plain", src: patternPrelude + `return S(string.find('hello world', 'o w'))`, want: "$3\r\n5,7\r\n"},
	{name: "pattern find init", src: patternPrelude + `return S(string.find('hello', 'l', 4))`, want: "$3\r\n4,4\r\n"},
	{name: "pattern find negative init", src: patternPrelude + `return S(string.find('hello', 'l', -2))`, want: "$3\r\n4,4\r\n"},
	{name: "pattern find init past end", src: patternPrelude + `return S(string.find('abc', '', 10))`, want: "$3\r\n4,3\r\n"},
	{name: "pattern find plain flag", src: patternPrelude + `return S(string.find('a.b', '.', 1, true))`, want: "$3\r\n2,2\r\n"},
	{name: "pattern find captures", src: patternPrelude + `return S(string.find('key=val', '(%w+)=(%w+)'))`, want: "$11\r\n1,7,key,val\r\n"},
	{name: "pattern find no match", src: patternPrelude + `return S(string.find('abc', '%d'))`, want: "$3\r\nnil\r\n"},
	{name: "pattern find nul plain", src: patternPrelude + `return S(string.find('a\0b', 'a\0b'))`, want: "$3\r\n1,3\r\n"},
	{name: "pattern match trim", src: patternPrelude + `return S(string.match('  trim  ', '^%s*(.-)%s*$'))`, want: "$4\r\ntrim\r\n"},
	{name: "pattern match position captures", src: patternPrelude + `return S(string.match('hello', '()ll()'))`, want: "$3\r\n3,5\r\n"},
	{name: "pattern match anchor fails", src: patternPrelude + `return S(string.match('xhello', '^hello'))`, want: "$3\r\nnil\r\n"},
	{name: "pattern match dollar", src: patternPrelude + `return S(string.match('hello', 'lo$'), string.match('hel$lo', 'l$l'))`, want: "$6\r\nlo,l$l\r\n"},
	{name: "pattern match balanced", src: patternPrelude + `return S(string.match('f(a(b)c)d', '%b()'))`, want: "$7\r\n(a(b)c)\r\n"},
	{name: "pattern match backreference", src: patternPrelude + `return S(string.match([[say "hi" ok]], [[(["'])(.-)%1]]))`, want: "$4\r\n\",hi\r\n"},
	{name: "pattern match lazy greedy", src: patternPrelude + `return S(string.match('<a><b>', '<(.-)>'), string.match('<a><b>', '<(.*)>'))`, want: "$6\r\na,a><b\r\n"},
	{name: "pattern match optional", src: patternPrelude + `return S(string.match('color colour', 'colou?r'), string.match('colour', 'colou?r'))`, want: "$12\r\ncolor,colour\r\n"},
	{name: "pattern match sets", src: patternPrelude + `return S(string.match('abc123', '[%a]+'), string.match('abc123', '[^%a]+'), string.match('abcd', '[a-c]+'), string.match('x]', '[]]'), string.match('a-', '[a-]+'), string.match('x^', '[x^]+'))`, want: "$19\r\nabc,123,abc,],a-,x^\r\n"},
	{name: "pattern match classes", src: patternPrelude + `return S(string.match('aB3 ,\t', '%u%d'), string.match('x1F', '%x+'), string.match('a,b', '%p'), string.match('A b', '%S+%s%l'), string.match('\1a', '%c'), #string.match('a\0b', '%z'), string.match('a.b', '%.'))`, want: "$17\r\nB3,1F,,,A b,\x01,1,.\r\n"},
	{name: "pattern match nul in pattern", src: patternPrelude + `return S(string.match('ab', 'a\0.'))`, want: "$1\r\na\r\n"},
	{name: "pattern match init", src: patternPrelude + `return S(string.match('abcabc', 'b', 3), string.match('abc', 'a', -10))`, want: "$3\r\nb,a\r\n"},
	{name: "pattern match plus", src: patternPrelude + `return S(string.match('aaab', 'a+'), string.match('b', 'a+b'))`, want: "$7\r\naaa,nil\r\n"},
	{name: "pattern match frontier", src: patternPrelude + `return S(string.gsub('THE (quick) fox', '%f[%a]%a+', 'X'))`, want: "$9\r\nX (X) X,3\r\n"},
	{name: "pattern gmatch words", src: patternPrelude + `local t = {} for w in string.gmatch('one two  three', '%a+') do t[#t+1] = w end return S(unpack(t))`, want: "$13\r\none,two,three\r\n"},
	{name: "pattern gmatch pairs", src: patternPrelude + `local t = {} for k, v in string.gmatch('a=1, b=2', '(%w+)=(%w+)') do t[#t+1] = k .. ':' .. v end return S(unpack(t))`, want: "$7\r\na:1,b:2\r\n"},
	{name: "pattern gmatch caret literal", src: patternPrelude + `local t = {} for w in string.gmatch('^a^b', '^%a') do t[#t+1] = w end return S(unpack(t))`, want: "$5\r\n^a,^b\r\n"},
	{name: "pattern gmatch empty matches", src: patternPrelude + `local n = 0 for w in string.gmatch('abc', 'x*') do n = n + 1 end return S(n)`, want: "$1\r\n4\r\n"},
	{name: "pattern gsub string repl", src: patternPrelude + `return S(string.gsub('hello world', '(o)', '[%1%0%%]'))`, want: "$21\r\nhell[oo%] w[oo%]rld,2\r\n"},
	{name: "pattern gsub max", src: patternPrelude + `return S(string.gsub('aaa', 'a', 'b', 2))`, want: "$5\r\nbba,2\r\n"},
	{name: "pattern gsub anchored", src: patternPrelude + `return S(string.gsub('aaa', '^a', 'b'))`, want: "$5\r\nbaa,1\r\n"},
	{name: "pattern gsub empty pattern", src: patternPrelude + `return S(string.gsub('abc', '', '-'))`, want: "$9\r\n-a-b-c-,4\r\n"},
	{name: "pattern gsub table", src: patternPrelude + `return S(string.gsub('$name is $age', '%$(%w+)', {name='bob'}))`, want: "$13\r\nbob is $age,2\r\n"},
	{name: "pattern gsub function", src: patternPrelude + `return S(string.gsub('abc', '%w', function(c) if c == 'b' then return false end return c:upper() end))`, want: "$5\r\nAbC,3\r\n"},
	{name: "pattern gsub function number", src: patternPrelude + `return S(string.gsub('a1b2', '%d', function(d) return d * 2 end))`, want: "$6\r\na2b4,2\r\n"},
	{name: "pattern gsub position capture", src: patternPrelude + `return S(string.gsub('abc', '()b', '%1'))`, want: "$5\r\na2c,1\r\n"},
	{name: "pattern gsub percent other", src: patternPrelude + `return S(string.gsub('abc', 'b', '%x'))`, want: "$5\r\naxc,1\r\n"},
	{name: "pattern gsub final percent", src: patternPrelude + `local r = string.gsub('abc', 'b', '%') return S(#r, string.byte(r, 2))`, want: "$3\r\n3,0\r\n"},
	{name: "pattern gsub number repl", src: patternPrelude + `return S(string.gsub('abc', 'b', 12))`, want: "$6\r\na12c,1\r\n"},
	{name: "pattern gsub whole match no captures", src: patternPrelude + `return S(string.gsub('abc', '%w', '%1'))`, want: "$5\r\nabc,3\r\n"},
	{name: "pattern error unfinished capture", src: patternPrelude + `return select(2, pcall(function() return string.find('a', '(') end))`, want: "$33\r\nuser_script:1: unfinished capture\r\n"},
	{name: "pattern error ends with percent", src: patternPrelude + `return select(2, pcall(function() return string.find('a', '%') end))`, want: "$48\r\nuser_script:1: malformed pattern (ends with '%')\r\n"},
	{name: "pattern error missing bracket", src: patternPrelude + `return select(2, pcall(function() return string.find('a', '[a') end))`, want: "$46\r\nuser_script:1: malformed pattern (missing ']')\r\n"},
	{name: "pattern error unbalanced", src: patternPrelude + `return select(2, pcall(function() return string.find('a', '%b') end))`, want: "$33\r\nuser_script:1: unbalanced pattern\r\n"},
	{name: "pattern error frontier", src: patternPrelude + `return select(2, pcall(function() return string.find('a', '%fa') end))`, want: "$48\r\nuser_script:1: missing '[' after '%f' in pattern\r\n"},
	{name: "pattern error invalid pattern capture", src: patternPrelude + `return select(2, pcall(function() return string.find('a', 'a)') end))`, want: "$-1\r\n"},
	{name: "pattern error invalid capture index", src: patternPrelude + `return select(2, pcall(function() return string.match('a', '%1') end))`, want: "$36\r\nuser_script:1: invalid capture index\r\n"},
	{name: "pattern error gsub capture index", src: patternPrelude + `return select(2, pcall(function() return string.gsub('abc', '%w', '%2') end))`, want: "$36\r\nuser_script:1: invalid capture index\r\n"},
	{name: "pattern error too many captures", src: patternPrelude + `return select(2, pcall(function() return string.match('a', string.rep('()', 33)) end))`, want: "$32\r\nuser_script:1: too many captures\r\n"},
	{name: "pattern error gsub repl type", src: patternPrelude + `return select(2, pcall(string.gsub, 'a', 'a', true))`, want: "$55\r\nbad argument #3 to '?' (string/function/table expected)\r\n"},
	{name: "pattern error gsub repl value", src: patternPrelude + `return select(2, pcall(function() return string.gsub('a', 'a', function() return {} end) end))`, want: "$50\r\nuser_script:1: invalid replacement value (a table)\r\n"},
	{name: "pattern error from pcall directly", src: patternPrelude + `return select(2, pcall(string.find, 'a', '('))`, want: "$18\r\nunfinished capture\r\n"},
	{name: "pattern error invalid pattern capture match", src: patternPrelude + `return select(2, pcall(function() return string.match('a', 'a)') end))`, want: "$38\r\nuser_script:1: invalid pattern capture\r\n"},
}
